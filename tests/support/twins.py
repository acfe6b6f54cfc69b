"""The suites of the layers that have compiled twins (wal, tuples, decoding) import
:func:`both_implementations` into their conftest: every test there then runs twice, with the
compiled twins and with pure Python (the ``implementation`` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def both_implementations(implementation: str) -> str:
    return implementation
