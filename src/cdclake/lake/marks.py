"""A mark on a mirror: a table property holding a JSON object (the quarantine, the inexact
mark), read the same way however it was written."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def mark_of(properties: Mapping[str, str], name: str, field: str) -> dict[str, Any] | None:
    """The object property ``name`` holds (None: no such property); a value that is not a
    JSON object — written by hand, or by an older cdclake — is kept whole as ``field``."""
    raw = properties.get(name)
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    return found if isinstance(found, dict) else {field: raw}
