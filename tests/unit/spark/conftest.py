"""Real WAL for the Spark stage tests: the committed fixtures of tests/unit/wal and
tests/unit/decoding."""

from __future__ import annotations

from tests.unit.decoding.conftest import decfix
from tests.unit.wal.conftest import wal15, walfix

__all__ = ["decfix", "wal15", "walfix"]
