"""The suites of the layers that have compiled twins (wal, tuples, decoding) import
:func:`both_implementations` into their conftest: every test there then runs twice, with the
compiled twins and with pure Python (the ``implementation`` fixture of tests/conftest.py).
A module of those suites whose code has no twin imports :func:`no_twin` instead, which
replaces the parametrised fixture for that module: its tests run once."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def both_implementations(implementation: str) -> str:
    return implementation


@pytest.fixture(scope="module", name="implementation")
def no_twin() -> str:
    """The ``implementation`` of a test module whose code has no compiled twin (no test of it
    calls a twinned function, in this process or another): its tests run once."""
    return "compiled"
