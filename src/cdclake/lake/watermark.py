"""Each table's own record of how far the stream has been applied (Flink's committer idea).

Every cdclake commit puts ``cdclake.commit-lsn`` (the last commit LSN applied) and
``cdclake.stream`` in its snapshot summaries, in the same atomic catalog commit as the data. On
a run the merge reads it back from the current snapshot's ancestry — a compaction or another
tool's snapshot in between carries no cdclake summary, so the walk goes on to the newest one
that does — and applies only changes committed after it. So a re-run is a no-op, and after a
crash between two tables each table resumes from its own point: nothing lost, nothing twice.

A per-table LSN cannot tell a batch that was never merged from one with no changes for that
table, so the namespace also records, per stream, the end LSN of the last batch merged in full:
a batch that starts after it means one in between is missing, and the merge refuses it.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from cdclake.errors import LakeError

COMMIT_LSN = "cdclake.commit-lsn"
STREAM = "cdclake.stream"
BATCH = "cdclake.batch"


def committed_lsn(table: Table, stream: str) -> int | None:
    """The last commit LSN applied to ``table`` by ``stream``, or None if none was.

    From the newest snapshot in the table's ancestry that carries one; when maintenance
    (:mod:`cdclake.lake.maintenance`) has rewritten the files and expired every such
    snapshot, from the table properties it wrote first."""
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None:
            continue
        lsn = summary.additional_properties.get(COMMIT_LSN)
        if lsn is not None:
            return _owned(table, summary.additional_properties.get(STREAM), stream, lsn)
    lsn = table.properties.get(COMMIT_LSN)
    if lsn is not None:
        return _owned(table, table.properties.get(STREAM), stream, lsn)
    return None


def _owned(table: Table, owner: str | None, stream: str, lsn: str) -> int:
    if owner != stream:
        raise LakeError(f"table {'.'.join(table.name())} was last written by cdclake stream "
                        f"{owner!r}, not {stream!r}: one mirror takes one stream; use "
                        "another namespace or drop the table")
    return int(lsn)


def watermark_properties(stream: str, commit_lsn: int) -> dict[str, str]:
    """The table properties that keep a table's watermark through snapshot expiry."""
    return {COMMIT_LSN: str(commit_lsn), STREAM: stream}


def merged_end_lsn(catalog: Catalog, namespace: str, stream: str) -> int | None:
    """The end LSN of the last batch of ``stream`` merged completely (all tables); None
    before the first (reading creates nothing)."""
    if not catalog.namespace_exists(namespace):
        return None
    value = catalog.load_namespace_properties(namespace).get(_merged_key(stream))
    return int(value) if value is not None else None


def record_merged(catalog: Catalog, namespace: str, stream: str, end_lsn: int) -> int:
    """Advance the stream's merged end LSN (never backwards: a replayed batch keeps it);
    returns it."""
    current = merged_end_lsn(catalog, namespace, stream)
    if current is not None and end_lsn <= current:
        return current
    catalog.create_namespace_if_not_exists(namespace)
    catalog.update_namespace_properties(namespace, updates={_merged_key(stream): str(end_lsn)})
    return end_lsn


def _merged_key(stream: str) -> str:
    return f"cdclake.{stream}.merged-end-lsn"


def summary_properties(stream: str, batch: str, commit_lsn: int) -> dict[str, str]:
    """What every snapshot of a cdclake commit carries."""
    return {COMMIT_LSN: str(commit_lsn), STREAM: stream, BATCH: batch}
