"""The committed WAL fixtures of tests/unit/wal, and the decoding fixtures of
tests/unit/decoding/fixtures, for decoding tests over real records."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.twins import both_implementations  # noqa: F401 - autouse: both implementations
from tests.unit.decoding.fixture import VERSIONS, DecodingFixture, load
from tests.unit.wal.conftest import walfix

__all__ = ["decfix", "walfix"]


@pytest.fixture(params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def decfix(request: pytest.FixtureRequest, tmp_path: Path) -> DecodingFixture:
    """Each version's decoding fixture, decompressed into its own tmp directory."""
    return load(request.param, tmp_path / f"wal{request.param}")
