"""Every test here runs with both implementations of the hot paths (tests/support/twins.py)."""

from __future__ import annotations

from tests.support.twins import both_implementations  # noqa: F401 - autouse: both implementations
