"""The archive's e2e tests: the session's S3 endpoint (tests/e2e/conftest.py), a fresh prefix
of its bucket per test."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from cdclake.config import Config
from cdclake.local.s3 import LocalS3

_prefixes = itertools.count()


@pytest.fixture
def s3_config(local_s3: LocalS3, tmp_path: Path) -> Config:
    """Config pointing at a fresh prefix of the bucket (tests do not see each other)."""
    return local_s3.config(Config(home=tmp_path / "home"), prefix=f"t{next(_prefixes)}/stream")
