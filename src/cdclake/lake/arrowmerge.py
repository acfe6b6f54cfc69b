"""The pyiceberg merge engine: one table's batch in this process, one Iceberg transaction.

Reads the table's commit LSN and drops the changes already applied (and, for a mirror an
initial snapshot filled, those of transactions the snapshot saw: :mod:`cdclake.lake.visibility`);
reads the data files holding rows the rest can touch (:mod:`cdclake.lake.region`); replays the
changes on those files' rows in source order (:mod:`cdclake.lake.apply`) — or, for most
batches, computes the same result column-wise (:mod:`cdclake.lake.columnar`); then, in one
transaction, removes those files, evolves the schema and appends what the replay left — every
snapshot of it carrying the batch's last commit LSN in its summary. A TRUNCATE or table
rewrite in the batch replaces every file instead; an enum label renamed in the source
(:mod:`cdclake.lake.labels`) makes the replay read every file, and the labels the rows now
have are kept in the table's properties, as does a column type change that leaves stored
values to convert (:mod:`cdclake.lake.retype`). The schema is evolved to the types the
replayed rows end up in: a field whose type cannot hold them is replaced in that commit.

It takes every table exactly (the Spark engine hands it those it cannot) and imports nothing
of Spark. pyiceberg's ``Table.upsert`` is not used: it needs one row per key in its input (so
the net effect must be computed first anyway), cannot delete, cannot match REPLICA IDENTITY
FULL rows as a multiset (two identical rows, one deleted), and knows nothing of
unchanged-TOAST columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, Transaction
from pyiceberg.types import NestedField

from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake import columnar, inexact, labels, quarantine
from cdclake.lake.apply import Counts, MirrorState, Row, apply_changes, canonical, column_value
from cdclake.lake.batch import Batch, TableChanges, TableEntry
from cdclake.lake.changes import CLEARING_OPS, NOTHING, Change, Prepared, prepare, versions_of
from cdclake.lake.metrics import guard_metrics
from cdclake.lake.region import (
    MAX_FILTER_KEYS,
    NOTHING_TO_READ,
    WHOLE_TABLE,
    Region,
    affected_region,
)
from cdclake.lake.reports import TableReport
from cdclake.lake.retype import held_through, typed
from cdclake.lake.rows import row_texts, rows_from_arrow, rows_to_arrow
from cdclake.lake.schema import (
    apply_evolution,
    field_types,
    iceberg_schema,
    mirror_fields,
    mirror_system_fields,
    plan_evolution,
)
from cdclake.lake.tables import (
    MIRROR,
    commit_with_retry,
    mirror_identifier,
    row_count,
    snapshot_id,
    table_loader,
)
from cdclake.lake.values import PgText, plain_values
from cdclake.lake.visibility import facts_of
from cdclake.lake.watermark import committed_lsn, summary_properties
from cdclake.lsn import format_lsn


@dataclass
class ArrowMerge:
    """The :class:`cdclake.lake.engine.MergeEngine` that merges in this process with
    pyiceberg and Arrow; ``max_filter_keys`` bounds the keys a region's scan filter names,
    ``max_attempts`` the commits tried against concurrent writers."""

    catalog: Catalog
    config: Config
    max_filter_keys: int = MAX_FILTER_KEYS
    max_attempts: int = 5
    name: ClassVar[str] = "pyiceberg"

    def merge_table(self, batch: Batch, entry: TableEntry, *,
                    loaded: TableChanges | None = None) -> TableReport:
        """Merge one table's changes of ``batch`` into its mirror in one Iceberg transaction:
        in Arrow when :func:`cdclake.lake.columnar.takes` them, else replayed."""
        latest = entry.versions[-1].relation
        ident = mirror_identifier(self.config, latest.schema, latest.name)
        report = TableReport(entry.table, ".".join(ident), sum(v.rows for v in entry.versions))
        if not report.changes:
            return report
        arrow = columnar.takes(batch, entry)
        prepared: list[Prepared] = []

        def replayed() -> Prepared:
            if not prepared:
                prepared.append(prepare(loaded or batch.load(entry), batch.name))
            return prepared[0]

        if arrow is not None:
            last_lsn = arrow.last_lsn
            schema = iceberg_schema(arrow.info.relation, arrow.info.arrow_schema)
        else:
            last_lsn = replayed().last_lsn
            last = replayed().versions[-1]
            schema = iceberg_schema(last.relation, last.arrow_schema)

        def attempt(table: Table) -> TableReport:
            report.attempts += 1
            if arrow is not None:
                done = _merge_columnar(table, self.config, batch.name, arrow, last_lsn, report,
                                       self.max_filter_keys)
                if done is not None:
                    return done
            return _merge_once(table, self.config, batch.name, replayed(), report,
                               self.max_filter_keys)

        def landed(table: Table) -> TableReport:
            report.commit_lsn = committed_lsn(table, self.config.stream)
            report.snapshot_id = snapshot_id(table)
            return report

        what = f"merge of {entry.table} into {report.mirror}"

        def advice() -> str:  # nothing of this table committed
            kept = "none" if report.previous_lsn is None else format_lsn(report.previous_lsn)
            return (f"the table keeps commit LSN {kept}: re-run the merge when the cause is "
                    "fixed")

        return commit_with_retry(table_loader(self.catalog, self.config, ident, schema, latest,
                                              entry.oid, MIRROR),
                                 attempt, stream=self.config.stream, target_lsn=last_lsn,
                                 done=landed, what=what, max_attempts=self.max_attempts,
                                 advice=advice)


def _merge_columnar(table: Table, config: Config, batch: str, arrow: columnar.Changes,
                    last_lsn: int, report: TableReport,
                    max_filter_keys: int) -> TableReport | None:
    """:func:`cdclake.lake.columnar.merge` into ``report``; None: the replay must take it."""
    stored = committed_lsn(table, config.stream)
    _reset(report)
    report.previous_lsn = report.commit_lsn = stored
    report.snapshot_id = snapshot_id(table)
    done = columnar.merge(table, arrow, name=report.table, stored=stored,
                          facts=facts_of(table.properties, report.table),
                          properties=summary_properties(config.stream, batch, last_lsn),
                          max_keys=max_filter_keys)
    if done is None:
        return None
    report.skipped_applied, report.skipped_snapshot = done.skipped_applied, done.skipped_snapshot
    if not done.pending:
        return report  # already applied: no commit, no snapshot
    for k, v in done.counts.to_json().items():
        setattr(report, k, v)
    report.rows_written = done.rows_written
    report.strategy = done.strategy
    report.schema_changes = done.schema_changes
    report.commit_lsn = last_lsn
    report.snapshot_id = done.snapshot_id
    return report


def _merge_once(table: Table, config: Config, batch: str, prepared: Prepared,
                report: TableReport, max_filter_keys: int) -> TableReport:
    name = prepared.source.table
    stored = committed_lsn(table, config.stream)
    unseen = [c for c in prepared.changes if stored is None or c.commit_lsn > stored]
    # a mirror filled by an initial snapshot already holds what the snapshot saw
    facts = facts_of(table.properties, name)
    pending = unseen if facts is None else [
        c for c in unseen if not facts.in_snapshot(c.commit_lsn, c.xid)]
    _reset(report)
    report.previous_lsn = stored
    report.commit_lsn = stored
    report.skipped_applied = len(prepared.changes) - len(unseen)
    report.skipped_snapshot = len(unseen) - len(pending)
    snap = table.current_snapshot()
    report.snapshot_id = snap.snapshot_id if snap else None
    if not pending:
        return report  # already applied: no commit, no snapshot
    blocked = quarantine.unprinted(pending)
    if blocked is not None:  # the mirror stays as it is: nothing of the batch is applied
        report.quarantined = quarantine.reason(name, *blocked)
        quarantine.mark(table, report.quarantined, batch, blocked[0])
        return report

    stored_types = field_types(table.schema(), name)
    counts = Counts()
    stored_enums = labels.stored_labels(table.metadata.properties)
    enums = labels.combine([stored_enums, prepared.labels])
    relabelled = labels.translation(stored_enums, enums)  # stored rows with renamed labels
    last_t = max((i for i, c in enumerate(pending) if c.op in CLEARING_OPS), default=None)
    if last_t is not None:
        _count_superseded(pending[:last_t], counts)
        to_apply = pending[last_t:]
        files = _all_files(table)  # TRUNCATE or a rewrite: every stored row goes
        base: list[Row] = []
        report.strategy = "truncate" if pending[last_t].op == stream.OP_TRUNCATE else "rewrite"
    else:
        to_apply = pending
        region = NOTHING_TO_READ if snap is None else affected_region(
            to_apply, mirror_fields(table.schema(), name), table=name,
            table_rows=row_count(table), max_keys=max_filter_keys)
        _, retyped = held_through(stored_types, [v.columns for v in versions_of(to_apply)])
        if snap is not None and (relabelled or retyped):
            region = WHOLE_TABLE  # every stored row shows new labels, or a new type's values
        files, base = read_touched(table, region, name)
        for row in base if relabelled else ():
            labels.relabel(row.values, relabelled)
        report.strategy = region.strategy
    state = MirrorState(base, name, stored_types)
    apply_changes(state, to_apply, counts)
    last = prepared.versions[-1]
    state.use(last)  # the rows' values under the types the commit ends at
    evolution = plan_evolution(table.schema(), typed(last.columns, state.types), name,
                               mirror_system_fields())

    props = summary_properties(config.stream, batch, prepared.last_lsn)
    tx = table.transaction()
    if files:
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            for data_file in files:
                overwrite.delete_data_file(data_file)
    apply_evolution(tx, evolution)
    if enums != stored_enums:
        tx.set_properties({labels.PROPERTY: labels.property_value(enums)})
    _mark_inexact(tx, table, batch, to_apply, cleared=last_t is not None)
    rows = state.rows()
    data = rows_to_arrow(rows, tx.table_metadata.schema(), last.defaults, name)
    guard_metrics(tx, data)
    tx.append(data, snapshot_properties=props)  # always: the last snapshot carries the LSN
    # filled before the commit: an unknown outcome that did land reports the same
    for k, v in counts.to_json().items():
        setattr(report, k, v)
    report.rows_written = len(rows)
    report.schema_changes = [c.describe() for c in evolution]
    committed = tx.commit_transaction()
    report.commit_lsn = prepared.last_lsn
    cur = committed.current_snapshot()
    report.snapshot_id = cur.snapshot_id if cur else None
    return report


def _mark_inexact(tx: Transaction, table: Table, batch: str, applied: Sequence[Change], *,
                  cleared: bool) -> None:
    """Mark the mirror inexact in the merge's own commit when it skips an UPDATE or DELETE
    for want of a replica identity (:mod:`cdclake.lake.inexact`); ``cleared``: the batch's
    TRUNCATE or rewrite replaced every stored row first."""
    skipped = [c for c in applied if c.op in (stream.OP_UPDATE, stream.OP_DELETE)
               and c.version.identity.kind == NOTHING]
    value = inexact.marked(table.properties, len(skipped),
                           skipped[0].commit_lsn if skipped else 0, batch, cleared=cleared)
    if value is not None and value != table.properties.get(inexact.PROPERTY):
        tx.set_properties({inexact.PROPERTY: value})
    elif value is None and inexact.PROPERTY in table.properties:
        tx.remove_properties(inexact.PROPERTY)


def _reset(report: TableReport) -> None:
    for k in Counts().to_json():
        setattr(report, k, 0)
    report.rows_written = 0
    report.schema_changes = []
    report.strategy = "none"
    report.quarantined = ""


def _count_superseded(changes: Sequence[Change], counts: Counts) -> None:
    """Changes before the batch's last TRUNCATE or rewrite: applied, then replaced — only
    counted."""
    for c in changes:
        if c.op == stream.OP_TRUNCATE:
            counts.truncated += 1
        elif c.op == stream.OP_REWRITE:
            counts.rewritten += 1
        elif c.op == stream.OP_REWRITE_BEGIN:
            continue
        elif c.op == stream.OP_INSERT:
            counts.inserted += 1
        elif c.version.identity.kind == NOTHING:
            counts.identity_nothing += 1
        elif c.op == stream.OP_UPDATE:
            counts.updated += 1
        else:
            counts.deleted += 1


def _all_files(table: Table) -> list[DataFile]:
    return [task.file for task in table.scan().plan_files()]


def read_touched(table: Table, region: Region, name: str) -> tuple[list[DataFile], list[Row]]:
    """The data files holding a row the region touches, and all of their rows (the rows that
    only share a file with a touched one are written back as they are)."""
    if region.empty:
        return [], []
    schema = table.schema()
    fields = mirror_fields(schema, name)
    files: list[DataFile] = []
    rows: list[Row] = []
    try:
        for task in table.scan(row_filter=region.filter).plan_files():
            data = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table([task])
            if region.everything or _touched(data, region, fields, name):
                files.append(task.file)
                rows.extend(rows_from_arrow(data, schema, name))
    except LakeError:
        raise
    except Exception as exc:
        raise LakeError(f"mirror of {name}: cannot read the rows the batch touches: "
                        f"{type(exc).__name__}: {exc}") from exc
    return files, rows


def _touched(data: pa.Table, region: Region, fields: Mapping[int, NestedField],
             name: str) -> bool:
    """Does this file hold a row the region names? Only the identity columns (and the exact
    texts of their untyped values) are read."""
    n = data.num_rows
    texts = row_texts(data, list(fields), f"mirror of {name}")
    for group in region.groups:
        columns = []
        for a in group.attnums:
            if a in fields:
                values = plain_values(data.column(fields[a].name))
                if texts is not None:
                    values = [PgText(t[a]) if a in t else v
                              for v, t in zip(values, texts, strict=True)]
                columns.append(values)
            else:  # added by this batch: stored rows read the default
                columns.append([column_value({}, a, group.defaults, name)] * n)
        if any(tuple(canonical(v) for v in key) in group.keys for key in zip(*columns,
                                                                              strict=True)):
            return True
    return False
