"""Which decoded batches passed the change-stream validation: one record per batch.

Validating the stream and merging it are separate steps (separate Airflow tasks), each under
the lake lease, taken twice: between them another run can decode a batch, and a merge that
took every pending batch would merge one nobody validated. So the validation step records,
for each batch whose stream suite passed, what it validated —
``state/validated/<batch>.json``: the batch, the sha256 of its manifest, the tables checked
(all, or those a run's ``tables`` named), the suite's summary and when — and the merge takes
a batch only when such a record matches it: the same manifest bytes (a batch decoded again
after it was validated is validated again) and every table the merge takes.

The record is a fact about content, not about who holds a lease: a run that lost the lease
and still writes one writes a true one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cdclake.archive import Layout, ObjectStore
from cdclake.archive.manifest import utc_now_iso
from cdclake.catalog.model import RelationVersion
from cdclake.errors import ObjectNotFound
from cdclake.lake.batch import selected
from cdclake.lake.pending import DecodedBatch


def _record(store: ObjectStore, layout: Layout, batch: DecodedBatch) -> dict[str, Any] | None:
    """The batch's validation record when it is for these manifest bytes, else None."""
    try:
        record = json.loads(store.get(layout.validated_key(batch.name)))
    except (ObjectNotFound, ValueError):
        return None
    if not isinstance(record, dict) or record.get("manifest_sha256") != batch.sha256:
        return None
    return record


def record_validation(store: ObjectStore, layout: Layout, batch: DecodedBatch,
                      tables: Sequence[str], summary: str) -> None:
    """Record that ``batch``'s stream suite passed for ``tables`` (empty: every table); a
    record of the same manifest already there widens to cover both."""
    scope: list[str] | None = sorted(set(tables)) if tables else None
    earlier = _record(store, layout, batch)
    if earlier is not None and scope is not None:
        scope = None if earlier.get("tables") is None else sorted(
            set(scope) | set(earlier["tables"]))
    store.put(layout.validated_key(batch.name), json.dumps({
        "batch": batch.name, "manifest_sha256": batch.sha256, "start_lsn": batch.start_lsn,
        "end_lsn": batch.end_lsn, "tables": scope, "success": True, "summary": summary,
        "validated_at": utc_now_iso()}, indent=1, sort_keys=True).encode())


def is_validated(store: ObjectStore, layout: Layout, batch: DecodedBatch,
                 tables: Sequence[str]) -> bool:
    """Whether ``batch`` (these manifest bytes) passed the stream suite for every table of it
    a merge of ``tables`` (empty: every table) takes."""
    record = _record(store, layout, batch)
    if record is None:
        return False
    scope = record.get("tables")
    if scope is None:
        return True
    for entry in batch.manifest.get("tables", ()):
        relations = [RelationVersion.from_json(v["relation"]) for v in entry["versions"]]
        taken = not tables or selected(tables, entry["table"], relations)
        if taken and not selected(scope, entry["table"], relations):
            return False
    return True
