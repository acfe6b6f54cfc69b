"""Tables the lake holds back because the stream cannot carry them exactly.

A value of a type cdclake cannot print (its output function is not one cdclake knows: a C base
type from an extension, say) reaches the lake as an ``_cdc_pg_text`` entry without text
(:data:`~cdclake.lake.values.UNPRINTED`). No merge can apply that change, and a mirror that
skipped it would differ from its source from then on without anyone knowing. So the merge
quarantines the table instead: its mirror is left as it is and marked with the table property
``cdclake.quarantine`` (why, and the batch and LSN of the change), every later merge leaves it
alone, and the other tables go on. Only a change the merge would apply decides: one the
mirror has already (its commit LSN) or that its initial snapshot saw is no reason.

A new copy of the table is what ends it: ``cdclake snapshot --tables schema.table`` replaces
the mirror's rows and drops the mark in the same commit (:mod:`cdclake.snapshot.mirror`), once
the column's type has changed in the source or a codec was added; or the table is excluded
(``CDCLAKE_EXCLUDE_TABLES``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.table import Table

from cdclake.archive.manifest import utc_now_iso
from cdclake.lake.changes import Change
from cdclake.lake.marks import mark_of
from cdclake.lake.values import UNPRINTED
from cdclake.lsn import format_lsn

#: the mirror table property of a quarantined table (JSON: reason, batch, lsn, since)
PROPERTY = "cdclake.quarantine"


def unprinted(changes: Iterable[Change]) -> tuple[Change, int] | None:
    """The first change holding a value cdclake could not print (in its new row or its old
    identity), and that value's attnum; None when every value was printed."""
    for change in changes:
        for values in (change.new, change.old):
            for attnum, value in (values or {}).items():
                if value is UNPRINTED:
                    return change, attnum
    return None


def reason(table: str, change: Change, attnum: int) -> str:
    """Why ``table`` is quarantined, and the way out."""
    column = change.version.relation.column_by_attnum(attnum).name
    return (f"column {column} (attnum {attnum}) has a value at LSN {format_lsn(change.lsn)} "
            f"(commit {format_lsn(change.commit_lsn)}) whose type cdclake cannot print (an "
            f"output function it does not know); change the column's type in the source and "
            f"run `cdclake snapshot --tables {table}`, or exclude the table "
            f"(CDCLAKE_EXCLUDE_TABLES)")


def mark(table: Table, why: str, batch: str, change: Change) -> Table:
    """Quarantine ``table`` (one metadata commit: no snapshot, its commit LSN unchanged)."""
    value = json.dumps({"reason": why, "batch": batch, "lsn": format_lsn(change.lsn),
                        "since": utc_now_iso()}, sort_keys=True)
    tx = table.transaction()
    tx.set_properties({PROPERTY: value})
    return tx.commit_transaction()


def quarantine_of(properties: Mapping[str, str]) -> dict[str, Any] | None:
    """The quarantine a mirror's properties record (None: it is not quarantined)."""
    return mark_of(properties, PROPERTY, "reason")
