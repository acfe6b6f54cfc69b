"""Every test here runs against both implementations of the hot paths (compiled, Python)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _both_implementations(implementation: str) -> str:
    return implementation
