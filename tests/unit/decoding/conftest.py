"""The committed WAL fixtures of tests/unit/wal, for decoding tests over real records."""

from __future__ import annotations

from tests.unit.wal.conftest import walfix

__all__ = ["walfix"]
