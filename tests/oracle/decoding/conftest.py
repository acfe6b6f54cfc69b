"""Every test here runs with both implementations of the hot paths (tests/twins.py)."""

from __future__ import annotations

from tests.twins import both_implementations  # noqa: F401 - autouse: both implementations
