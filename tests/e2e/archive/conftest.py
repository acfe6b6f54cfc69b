"""A real S3 endpoint over HTTP for the archive's e2e tests: moto_server in its own process.

The lead may move ``local_s3`` to tests/conftest.py once other packages need it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.config import Config
from cdclake.local.s3 import LocalS3

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    """One moto_server for the session, with the ``cdclake`` bucket."""
    with LocalS3.start() as server:
        yield server


@pytest.fixture
def s3_config(local_s3: LocalS3, tmp_path: Path) -> Config:
    """Config pointing at a fresh prefix of the bucket (tests do not see each other)."""
    return local_s3.config(Config(home=tmp_path / "home"), prefix=f"t{next(_prefixes)}/stream")
