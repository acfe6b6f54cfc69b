"""Mirrors the merge knows to differ from their source: UPDATEs and DELETEs it could not apply.

A table without a replica identity — REPLICA IDENTITY NOTHING, or DEFAULT without a primary
key — logs no old key for an UPDATE or DELETE, so no merge can tell which mirror row it
changed: the merge counts it (``identity_nothing``) and goes on. From then on the mirror
differs from its source, and that must not be known only to whoever reads a run report's
counts: the merge commit that skips such changes marks the mirror with the table property
``cdclake.inexact`` (how many changes were not applied, since which commit LSN and batch),
adding to the mark at every later skip. The console, the run report, ``cdclake status`` and
the mirror suite read it from there, with the way out.

What ends it is a new copy of every row: ``cdclake snapshot --tables schema.table`` (its
commit drops the mark, :mod:`cdclake.snapshot.mirror`), best after ``ALTER TABLE ... REPLICA
IDENTITY FULL`` so that later changes apply; or a TRUNCATE or a table rewrite merged after
the last change not applied, which replace the mirror's rows as the source's were replaced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cdclake.lake.marks import mark_of
from cdclake.lsn import format_lsn

#: the mirror table property of an inexact mirror (JSON: not_applied, since_lsn, since_batch)
PROPERTY = "cdclake.inexact"


def inexact_of(properties: Mapping[str, str]) -> dict[str, Any] | None:
    """What a mirror's mark says (None: the merge knows of no difference)."""
    return mark_of(properties, PROPERTY, "since_lsn")


def marked(properties: Mapping[str, str], not_applied: int, commit_lsn: int, batch: str,
           *, cleared: bool) -> str | None:
    """The mark after a merge commit that left ``not_applied`` changes unapplied, the first
    of them committed at ``commit_lsn``; ``cleared``: the commit replaced every row (a
    TRUNCATE or a rewrite after those changes), so an older mark no longer holds. None: no
    mark."""
    before = None if cleared else inexact_of(properties)
    if not not_applied:
        return None if before is None else properties[PROPERTY]
    if before is not None:
        return json.dumps({**before, "not_applied": (before.get("not_applied") or 0)
                           + not_applied}, sort_keys=True)
    return json.dumps({"not_applied": not_applied, "since_lsn": format_lsn(commit_lsn),
                       "since_batch": batch}, sort_keys=True)


def warning(table: str, mark: Mapping[str, Any]) -> str:
    """One line for people: what differs since when, and the way out."""
    return (f"{table} differs from its source since commit LSN {mark.get('since_lsn')}: "
            f"{mark.get('not_applied')} UPDATE/DELETE(s) not applied (the table has no replica "
            f"identity: no key in the WAL); fix: ALTER TABLE {table} REPLICA IDENTITY FULL, "
            f"then cdclake snapshot --tables {table}")
