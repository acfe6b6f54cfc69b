"""Merging one table's batch with Iceberg's Spark runtime: one ``MERGE INTO``, merge-on-read.

The pyiceberg merge (:mod:`cdclake.lake.arrowmerge`) replays a batch in one process and rewrites
every data file holding a touched row. Here the batch never enters the driver: executors read
the change Parquet from the store, Spark reduces it to the last change per key and one
``MERGE INTO`` applies that, writing position-delete files for the rows it replaces
(``write.*.mode = merge-on-read``; never equality deletes, so pyiceberg and DuckDB still read
the mirror). A batch costs O(changes + the data files holding touched keys).

The reduction keeps the pyiceberg merge's semantics for the tables it takes:

- every change is an *event* on a key: INSERT and UPDATE set the new key's row, DELETE removes
  the old key, and an UPDATE that changes the key also removes the old one; per key the last
  event (commit LSN, LSN, seq) wins, so a key deleted last is deleted from the mirror;
- a column whose TOASTed value was not logged (``_unchanged_toast``) takes the value of the
  key's previous event in the batch that carried it, else the mirror's (``UPDATE SET c = t.c``);
- a TRUNCATE supersedes what came before it: the rows set after the last one replace the
  mirror (``INSERT OVERWRITE``);
- changes at or below the table's summary LSN are skipped: a re-run commits nothing;
- columns are matched by attnum, so RENAME / ADD / DROP COLUMN inside the batch line up; the
  schema evolves (pyiceberg, metadata only) before the MERGE;
- the batch's last commit LSN goes into the MERGE's own snapshot summary (Iceberg's
  ``CommitMetadata`` commit properties), so the data and the watermark land together;
- a table without a key has its INSERTs appended, in a commit Iceberg validates against the
  snapshot the merge read the commit LSN from (:func:`append_since`): two overlapping merges
  of a batch cannot both append it. The MERGE INTO validates on its own (serializable).

A table this path cannot take exactly is declined (:class:`Declined`): :class:`SparkMerge`
hands it to its fallback engine (the pyiceberg merge), and the report says why
(:func:`static_reason`, :func:`data_reason`): UPDATEs or DELETEs of a table with replica
identity FULL or NOTHING (rows matched as a multiset; its INSERTs are appended here, and a
TRUNCATE overwrites), a key that changes columns inside the batch, ADD COLUMN ... DEFAULT
(older rows read the default), ``time`` columns (Spark 3.5 cannot read them), renamed enum
labels, a column type change no Iceberg promotion holds (the schema evolves in a commit of
its own here: a replaced column would be empty until the MERGE), a table rewrite, values kept
as exact text, and an UPDATE with unchanged TOAST that changes the key or leaves it unlogged.
The changes of transactions a mirror's initial snapshot saw are dropped here as in the
pyiceberg merge (:mod:`cdclake.lake.visibility`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import ListType, NestedField, TimeType, UUIDType

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake import labels, rules
from cdclake.lake.batch import Batch, TableChanges, TableEntry, VersionEntry
from cdclake.lake.changes import FULL, KEY, VersionInfo
from cdclake.lake.engine import MergeEngine
from cdclake.lake.reports import TableReport
from cdclake.lake.retype import Retype, evolved_columns
from cdclake.lake.rules import ORDER, Dialect, before, key_changed, sets, takes
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    apply_evolution,
    iceberg_schema,
    mirror_fields,
    mirror_system_fields,
    plan_evolution,
)
from cdclake.lake.sparkparts import read_parts, spark_ready
from cdclake.lake.tables import (
    MIRROR,
    ensure_table,
    existing_mirrors,
    key_columns,
    mirror_identifier,
    snapshot_id,
)
from cdclake.lake.visibility import SnapshotFacts, facts_of, in_snapshot
from cdclake.lake.watermark import committed_lsn, summary_properties
from cdclake.lsn import format_lsn
from cdclake.sparkenv.tasks import error_line, task

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.window import WindowSpec

#: the table properties that make Spark's row-level writes merge-on-read
MERGE_ON_READ = {"write.merge.mode": "merge-on-read", "write.update.mode": "merge-on-read",
                 "write.delete.mode": "merge-on-read"}
ENGINE = "spark"
_SET, _DEL = "set", "del"


@dataclass(frozen=True)
class _Version:
    """A relation version of the batch: its files and what its rows need."""

    entry: VersionEntry
    info: VersionInfo
    paths: tuple[str, ...]  #: on the batch's filesystem


@dataclass(frozen=True)
class BatchStats:
    """What one aggregation over a table's pending changes tells (nothing else is collected)."""

    rows: int
    ops: Mapping[str, int]
    texts: int  #: rows with values kept as exact text
    #: UPDATEs with unchanged TOAST columns that change the key or leave a TOASTed key unlogged
    toast_moves: int
    keyless: int  #: UPDATEs and DELETEs under a version without a replica identity
    min_commit: int | None
    max_commit: int | None
    in_snapshot: int  #: rows of transactions the mirror's initial snapshot saw (not pending)
    toast: frozenset[int]  #: attnums some change left unchanged (TOAST)


class Declined(Exception):
    """The Spark path cannot take this table's batch exactly; nothing was committed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class SparkMerge:
    """The :class:`cdclake.lake.engine.MergeEngine` that merges on Spark's executors; a table
    it declines (:class:`Declined`) goes to ``fallback``, the report saying why."""

    spark: SparkSession
    catalog: Catalog
    config: Config
    fallback: MergeEngine
    name: ClassVar[str] = ENGINE

    def merge_table(self, batch: Batch, entry: TableEntry, *,
                    loaded: TableChanges | None = None) -> TableReport:
        try:
            return merge_on_spark(self.spark, self.catalog, self.config, batch, entry)
        except Declined as declined:
            report = self.fallback.merge_table(batch, entry, loaded=loaded)
            report.fallback = declined.reason
            return report


class SparkDialect(Dialect):
    """The merge's rules (:mod:`cdclake.lake.rules`) over Spark columns (and Python scalars
    beside them): a rule is a column the executors compute."""

    def and_(self, a: Any, b: Any) -> Any:
        return a & b

    def or_(self, a: Any, b: Any) -> Any:
        return a | b

    def not_(self, a: Any) -> Any:
        return ~a

    def where(self, condition: Any, a: Any, b: Any) -> Any:
        from pyspark.sql import functions as F

        return F.when(condition, a).otherwise(b)

    def isin(self, a: Any, values: Collection[Any]) -> Any:
        from pyspark.sql import functions as F

        return a.isin(*values) if values else F.lit(False)

    def present(self, a: Any) -> Any:
        return a.isNotNull()

    def distinct(self, a: Any, b: Any) -> Any:
        return ~a.eqNullSafe(b)

    def last_in_group(self, frame: Any, keys: Sequence[str], order: Sequence[str]) -> Any:
        from pyspark.sql import functions as F

        last = _per_key(keys).orderBy(*(F.col(c).desc() for c in order))
        return (frame.withColumn("_rank", F.row_number().over(last)).where(F.col("_rank") == 1)
                .drop("_rank"))

    def previous_in_group(self, frame: Any, keys: Sequence[str], order: Sequence[str],
                          when: Any, value: Any) -> tuple[Any, Any]:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        before = _per_key(keys).orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
        # a struct, so that a null the row carried is found as one
        previous = F.last(F.when(when, F.struct(value.alias("v"))), ignorenulls=True).over(before)
        return previous.isNotNull(), previous.getField("v")


def _per_key(keys: Sequence[str]) -> WindowSpec:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return Window.partitionBy(*(F.col(_q(k)) for k in keys))


SPARK = SparkDialect()


def merge_on_spark(spark: SparkSession, catalog: Catalog, config: Config, batch: Batch,
                   entry: TableEntry) -> TableReport:
    """Merge ``entry``'s changes of ``batch`` with one MERGE INTO; raises :class:`Declined`
    when this path cannot take the table exactly (nothing was committed)."""
    versions = _versions(batch, entry)
    if not versions:
        raise Declined("no change rows")
    latest = versions[-1].info.relation
    ident = mirror_identifier(config, latest.schema, latest.name)
    report = TableReport(entry.table, ".".join(ident), sum(v.entry.rows for v in versions),
                         engine=ENGINE, not_found=None)
    table = ensure_table(catalog, ident, iceberg_schema(latest, versions[-1].info.arrow_schema),
                         stream=config.stream, source_table=f"{latest.schema}.{latest.name}",
                         source_oid=entry.oid, kind=MIRROR)
    stored_labels = labels.stored_labels(table.properties)
    columns, retyped = evolved_columns(table.schema(), entry.table,
                                       [v.info.columns for v in versions])
    reason = static_reason([v.info for v in versions], table, stored_labels, retyped)
    if reason:
        raise Declined(reason)
    stored = committed_lsn(table, config.stream)
    report.previous_lsn = report.commit_lsn = stored
    planned = report.snapshot_id = snapshot_id(table)  # what the merge plans from

    evolution = plan_evolution(table.schema(), columns, entry.table, mirror_system_fields())
    enums = labels.combine([stored_labels, *(v.info.labels for v in versions)])
    props = {k: v for k, v in MERGE_ON_READ.items() if table.properties.get(k) != v}
    if enums != stored_labels:
        props[labels.PROPERTY] = labels.property_value(enums)
    if evolution or props:  # metadata only; a re-run finds it done
        tx = table.transaction()
        apply_evolution(tx, evolution)
        if props:
            tx.set_properties(props)
        table = tx.commit_transaction()
    target = _spark_name(config, ident)
    fields = mirror_fields(table.schema(), entry.table)
    # a table without a key (FULL, NOTHING) is a multiset: only its INSERTs are taken here
    keyed = FULL not in {v.info.identity.kind for v in versions} and \
        versions[-1].info.identity.kind == KEY
    key = versions[-1].info.identity.attnums if keyed else ()
    try:
        spark.catalog.refreshTable(target)
        types = {f.name: f.dataType for f in spark.table(target).schema.fields}
        facts = facts_of(table.properties, entry.table)
        changes = _changes(spark, batch.filesystem, versions, fields, types, key, stored, facts)
        stats = batch_stats(changes, versions, key, fields)
    except LakeError:
        raise
    except Exception as exc:  # Py4J and pyspark errors: one line, nothing committed
        raise LakeError(f"merge of {entry.table} on Spark: cannot read its batch or its mirror "
                        f"{target} ({error_line(exc)}); nothing was committed") from exc
    report.skipped_applied = report.changes - stats.rows - stats.in_snapshot
    report.skipped_snapshot = stats.in_snapshot
    multiset = not keyed and (stats.ops.get(stream.OP_UPDATE) or stats.ops.get(stream.OP_DELETE))
    reason = ("replica identity FULL or NOTHING with UPDATEs or DELETEs (rows are matched as "
              "a multiset)" if multiset else data_reason(stats))
    if reason:
        raise Declined(reason)
    changes = changes.where("_pending")
    if stats.rows == 0:
        return report  # already applied: no commit, no snapshot
    assert stats.max_commit is not None
    report.inserted = stats.ops.get(stream.OP_INSERT, 0)
    report.updated = stats.ops.get(stream.OP_UPDATE, 0)
    report.deleted = stats.ops.get(stream.OP_DELETE, 0)
    report.schema_changes = [c.describe() for c in evolution]
    report.strategy = "merge-on-read"
    report.attempts = 1

    report.truncated = stats.ops.get(stream.OP_TRUNCATE, 0)
    if report.truncated:  # the mirror is emptied there: what came before is superseded
        changes = after_last_truncate(changes)
        report.strategy = "truncate"
    net = _events(changes, key, fields, stats.toast)
    if keyed:
        net = last_per_key(net, [fields[a].name for a in key],
                           [fields[a].name for a in stats.toast])
    elif not report.truncated:
        report.strategy = "append"
    view = f"cdclake_merge_{uuid.uuid4().hex[:12]}"
    net.createOrReplaceTempView(view)
    toast = {fields[a].name: a for a in stats.toast}

    def write() -> None:
        if keyed and not report.truncated:
            spark.sql(merge_sql(target, view, [fields[a].name for a in key],
                                [f.name for f in fields.values()], toast, entry.table))
            return
        rows = rows_sql(view, list(types), toast, entry.table)
        if report.truncated:
            spark.sql(f"INSERT OVERWRITE {target} {rows}")
        else:
            append_since(spark, target, rows, list(types), planned)

    what = f"merge of {entry.table} into {report.mirror}"
    try:
        with_commit_properties(
            spark, summary_properties(config.stream, batch.name, stats.max_commit), write)
    except Exception as exc:  # Spark raises Py4J and pyspark errors: the table decides
        lost = str(exc).find(_LOST)
        if lost >= 0:
            raise LakeError(str(exc)[lost + len(_LOST):].splitlines()[0]) from exc
        landed = catalog.load_table(ident)
        if (committed_lsn(landed, config.stream) or -1) < stats.max_commit:
            kept = "none" if stored is None else format_lsn(stored)
            raise LakeError(f"{what} failed ({error_line(exc)}); the table keeps commit LSN "
                            f"{kept}: re-run the merge when the cause is fixed") from exc
    finally:
        spark.catalog.dropTempView(view)
    table = catalog.load_table(ident)
    if committed_lsn(table, config.stream) != stats.max_commit:
        raise LakeError(f"{what}: the MERGE committed without cdclake's commit LSN in its "
                        "snapshot summary (is the Iceberg Spark runtime older than 1.4?)")
    snap = table.current_snapshot()
    summary = snap.summary.additional_properties if snap and snap.summary else {}
    report.rows_written = int(summary.get("added-records", 0))
    report.commit_lsn = stats.max_commit
    report.snapshot_id = snapshot_id(table)
    return report


# -- what this path takes --------------------------------------------------------------------


def static_reason(infos: Sequence[VersionInfo], table: Table, stored_labels: labels.Labels,
                  retyped: Sequence[Retype] = ()) -> str:
    """Why the batch's relation versions and the mirror cannot go through a Spark MERGE ('':
    they can); ``retyped``: the batch's column type changes no promotion holds."""
    if len({i.identity.attnums for i in infos if i.identity.kind == KEY}) > 1:
        return "the replica identity changes inside the batch"
    if any(i.defaults for i in infos):
        return "ADD COLUMN ... DEFAULT: rows written before it read the default"
    if table.format_version < 2:
        return "the mirror is an Iceberg v1 table (no position deletes)"
    unreadable = spark_unreadable(table)
    if unreadable:
        return unreadable
    if retyped:  # replaced, or stored values converted: both in the commit of the new values
        return (f"{retyped[0].describe()}, which Iceberg cannot promote (replaced in the "
                "commit that writes its new values)")
    combined = labels.combine([stored_labels, *(i.labels for i in infos)])
    if labels.translation(stored_labels, combined) or any(
            labels.translation(i.labels, combined) for i in infos):
        return "an enum label was renamed (stored rows are relabelled)"
    return ""


def spark_unreadable(table: Table) -> str:
    """Why Spark 3.5 cannot read ``table`` ('': it can)."""
    for f in table.schema().fields:
        t = f.field_type
        if isinstance(t, TimeType) or (isinstance(t, ListType)
                                       and isinstance(t.element_type, (TimeType, UUIDType))):
            return f"column {f.name} is {t} (Spark 3.5 cannot read it)"
    return ""


def spark_mirrors(spark: SparkSession, config: Config, catalog: Catalog,
                  relations: Mapping[str, RelationVersion],
                  since: Mapping[str, int | None] | None = None
                  ) -> tuple[dict[str, DataFrame], list[str], list[str]]:
    """:func:`cdclake.lake.tables.mirror_chunks` as Spark DataFrames, read by the executors
    (nothing is collected): the mirror of each source table, or with ``since`` the rows the
    run wrote plus, for a table with a key, every stored row sharing one of their keys (a
    semi-join: no limit on the number of keys). Also the tables with no mirror, and those
    Spark cannot read (``time`` columns), which the caller reads with pyiceberg."""
    from pyspark.sql import functions as F

    found, missing = existing_mirrors(config, catalog, relations)
    frames: dict[str, DataFrame] = {}
    unreadable: list[str] = []
    for name, rel, table in found:
        if spark_unreadable(table):
            unreadable.append(name)
            continue
        target = _spark_name(config, mirror_identifier(config, rel.schema, rel.name))
        spark.catalog.refreshTable(target)
        mirror = spark.table(target)
        lsn = since.get(name) if since is not None else None
        if lsn is not None:
            written = mirror.where(F.col(CDC_COMMIT_LSN) > F.lit(lsn))
            keys = key_columns(rel)
            if keys:  # a null key joins nothing: those written rows are added as they are
                null_key = reduce(lambda a, b: a | b, (F.col(_q(k)).isNull() for k in keys))
                written = mirror.join(written.select(*keys).distinct(), keys, "left_semi"
                                      ).unionByName(written.where(null_key))
            mirror = written
        frames[name] = mirror
    return frames, missing, unreadable


def data_reason(stats: BatchStats) -> str:
    """Why the batch's pending changes cannot go through a Spark MERGE ('': they can)."""
    other = {op for op, n in stats.ops.items() if n and op not in _ROW_OPS | {stream.OP_TRUNCATE}}
    if other:
        return f"the batch holds {'/'.join(sorted(other))} changes (a table rewrite)"
    if stats.texts:
        return f"{stats.texts} change rows keep values as exact text (_cdc_pg_text)"
    if stats.keyless:
        return (f"{stats.keyless} UPDATEs/DELETEs under a relation version without a replica "
                "identity (not applied; the pyiceberg merge counts them)")
    if stats.toast_moves:
        return (f"{stats.toast_moves} UPDATEs leave TOASTed columns unchanged while changing "
                "the key or leaving a TOASTed key unlogged")
    return ""


_ROW_OPS = frozenset({stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE})


# -- reading the batch on executors ------------------------------------------------------------


def _versions(batch: Batch, entry: TableEntry) -> list[_Version]:
    out = []
    for v in entry.versions:
        if not v.paths or v.rows == 0:
            continue
        paths = tuple(f"{batch.directory}/{p}" for p in v.paths)
        try:
            schema = pq.read_schema(paths[0], filesystem=batch.filesystem)
        except (OSError, pa.ArrowInvalid) as exc:
            raise LakeError(f"batch {batch.name}: cannot read {paths[0]} of table "
                            f"{entry.table}: {exc}") from exc
        out.append(_Version(v, VersionInfo.of(v.relation, schema), paths))
    return out


def _changes(spark: SparkSession, filesystem: pafs.FileSystem, versions: Sequence[_Version],
             fields: Mapping[int, NestedField], types: Mapping[str, Any],
             key: Sequence[int], stored: int | None, facts: SnapshotFacts | None) -> DataFrame:
    """Every version's pending change rows with the mirror's column names and Spark types,
    plus the stream's order, op, old key (``_old_<name>``) and unchanged-TOAST flags.

    Only changes committed after the mirror's commit LSN; ``_pending`` is false for those of
    a transaction the mirror's initial snapshot saw (:mod:`cdclake.lake.visibility`), which
    :func:`batch_stats` counts and :func:`merge_table` then drops."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    frames = []
    for v in versions:
        schema = pa.schema([f.with_type(spark_ready(f.type)) for f in v.info.arrow_schema])
        raw = (spark.createDataFrame([(p,) for p in v.paths], "path string")
               .repartition(max(1, min(len(v.paths), 64)))
               .mapInArrow(task(read_parts(filesystem, schema)), from_arrow_schema(schema)))
        if stored is not None:
            raw = raw.where(F.col(stream.COMMIT_LSN) > F.lit(stored))
        by_attnum = {c.attnum: c.name for c in v.info.columns}
        cols: list[Column] = []
        for attnum, f in fields.items():
            value = F.col(_q(by_attnum[attnum])) if attnum in by_attnum else F.lit(None)
            cols.append(value.cast(types[f.name]).alias(f.name))
        # a version without a key (a bulk load before ADD PRIMARY KEY) logs no old key
        keyed = v.info.identity.kind == KEY
        for attnum in key:
            old = F.col(stream.OLD_KEY).getField(by_attnum[attnum]) if keyed else F.lit(None)
            cols.append(old.cast(types[fields[attnum].name]).alias(_old(fields[attnum].name)))
        cols.append(F.lit(not keyed).alias("_keyless"))
        cols.append((F.lit(True) if facts is None else ~in_snapshot(
            SPARK, facts, F.col(stream.COMMIT_LSN), F.col(stream.XID))).alias("_pending"))
        toast = F.coalesce(F.col(stream.UNCHANGED_TOAST), F.array().cast("array<string>"))
        cols += [F.col(c) for c in (*ORDER, stream.COMMIT_TS, stream.OP)]
        cols.append(toast.alias(stream.UNCHANGED_TOAST))
        # attnums, not names: the flags of two versions line up
        attnums = F.create_map(*(F.lit(x) for a, n in by_attnum.items() for x in (n, a)))
        cols.append(F.transform(toast, _lookup(attnums)).alias("_toast_attnums"))
        cols.append(F.coalesce(F.size(F.col(stream.PG_TEXT)), F.lit(0)).alias("_texts"))
        frames.append(raw.select(*cols))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _lookup(mapping: Column) -> Callable[[Column], Column]:
    return lambda key: mapping[key]


def batch_stats(changes: DataFrame, versions: Sequence[_Version], key: Sequence[int],
                fields: Mapping[int, NestedField]) -> BatchStats:
    """Counts per op and the facts :func:`data_reason` needs, of the pending rows, and how
    many the initial snapshot holds: one Spark job."""
    from pyspark.sql import functions as F

    op = F.col(stream.OP)
    pending = F.col("_pending")

    def count(condition: Column) -> Column:  # of the pending rows
        return F.sum((pending & condition).cast("long"))

    # the row an unchanged TOAST value comes from is ambiguous when the key changes, or when
    # the key itself was not logged (a TOASTed key): the pyiceberg merge follows the old key
    key_unlogged = F.exists("_toast_attnums", lambda a: a.isin(*key))
    moved = (op == stream.OP_UPDATE) & (F.size(stream.UNCHANGED_TOAST) > 0) & (
        key_changed(SPARK, *_key_columns(key, fields)) | key_unlogged) if key else F.lit(False)
    row = changes.agg(
        count(F.lit(True)).alias("rows"),
        F.sum((~pending).cast("long")).alias("in_snapshot"),
        F.collect_set(F.when(pending, op)).alias("seen"),
        *(count(op == o).alias(f"n_{o}") for o in sorted(_ALL_OPS)),
        count(F.col("_texts") > 0).alias("texts"),
        count(moved).alias("moved"),
        count(F.col("_keyless") & op.isin(stream.OP_UPDATE, stream.OP_DELETE)).alias("keyless"),
        F.min(F.when(pending, F.col(stream.COMMIT_LSN))).alias("min_commit"),
        F.max(F.when(pending, F.col(stream.COMMIT_LSN))).alias("max_commit"),
        F.array_distinct(F.flatten(F.collect_set(F.when(pending, F.col("_toast_attnums")))))
        .alias("toast"),
    ).first()
    assert row is not None
    ops = {o: int(row[f"n_{o}"] or 0) for o in sorted(_ALL_OPS)}
    unknown = set(row["seen"] or ()) - _ALL_OPS
    if unknown:
        raise LakeError(f"unknown _op values {sorted(unknown)} in the change stream of "
                        f"{versions[-1].info.relation.schema}.{versions[-1].info.relation.name}")
    return BatchStats(int(row["rows"] or 0), ops, int(row["texts"] or 0),
                      int(row["moved"] or 0), int(row["keyless"] or 0), row["min_commit"],
                      row["max_commit"], int(row["in_snapshot"] or 0),
                      # an attnum a later version dropped is not in the mirror any more
                      frozenset(a for a in row["toast"] or () if a in fields))


_ALL_OPS = frozenset({stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE, stream.OP_TRUNCATE,
                      stream.OP_REWRITE_BEGIN, stream.OP_REWRITE})


def _key_columns(key: Sequence[int], fields: Mapping[int, NestedField]
                 ) -> tuple[list[Column], list[Column]]:
    """The key's old columns (``_old_<name>``: null where not logged) and new ones."""
    from pyspark.sql import functions as F

    names = [fields[a].name for a in key]
    return [F.col(_old(n)) for n in names], [F.col(_q(n)) for n in names]


# -- reduce, then MERGE --------------------------------------------------------------------------


def _events(changes: DataFrame, key: Sequence[int], fields: Mapping[int, NestedField],
            toast: frozenset[int]) -> DataFrame:
    """One row per (key, change): INSERT/UPDATE set the new key, DELETE and a key-changing
    UPDATE remove the old one."""
    from pyspark.sql import functions as F

    names = [f.name for f in fields.values()]
    keys = [fields[a].name for a in key]
    op = F.col(stream.OP)
    flags = [F.array_contains("_toast_attnums", a).alias(_flag(fields[a].name)) for a in toast]
    order = [F.col(c) for c in (*ORDER, stream.COMMIT_TS)]
    setting = changes.where(sets(SPARK, op)).select(
        *(F.col(_q(n)) for n in names), *order, F.lit(_SET).alias("_kind"), *flags)
    if not key:  # a table without a key brings only INSERTs here
        return setting
    cols = [(F.col(_old(n)) if n in keys else F.lit(None).cast(changes.schema[n].dataType))
            .alias(n) for n in names]
    taking = changes.where(takes(SPARK, op, *_key_columns(key, fields))).select(
        *cols, *order, F.lit(_DEL).alias("_kind"),
        *(F.lit(False).alias(_flag(fields[a].name)) for a in toast))
    return setting.unionByName(taking)


def last_per_key(events: DataFrame, keys: Sequence[str], toast: Sequence[str]) -> DataFrame:
    """The last event per key (:func:`rules.last_per_key`), its unchanged TOAST columns
    carried (:func:`rules.carry`: a flag left set means the MERGE keeps the mirror's)."""
    from pyspark.sql import functions as F

    out = events
    for name in toast:
        value, unchanged = rules.carry(SPARK, out, keys, F.col(_q(name)), F.col(_flag(name)),
                                       F.col("_kind") == _SET)
        out = out.withColumns({name: value, _flag(name): unchanged})  # both from the old
    return rules.last_per_key(SPARK, out, keys)


def after_last_truncate(changes: DataFrame) -> DataFrame:
    """The changes after the batch's last TRUNCATE (one small aggregation finds it)."""
    from pyspark.sql import functions as F

    last = changes.where(F.col(stream.OP) == stream.OP_TRUNCATE).agg(
        F.max(F.struct(*ORDER)).alias("t")).first()
    assert last is not None and last["t"] is not None
    return changes.where(before(SPARK, [last["t"][c] for c in ORDER],
                                [F.col(c) for c in ORDER]))


#: a written row's system columns, from the change that set it (every typed value: no texts)
_SYSTEM = {CDC_COMMIT_LSN: f"s.{stream.COMMIT_LSN}", CDC_COMMIT_TS: f"s.{stream.COMMIT_TS}",
           CDC_PG_TEXT: "NULL"}


def _new_value(column: str, toast: Mapping[str, int], table: str) -> str:
    """A column of a row the mirror does not have: an unchanged TOAST value there has nothing
    to come from, and fails the statement."""
    value = f"s.{_q(column)}"
    if column not in toast:
        return value
    return (f"CASE WHEN s.{_q(_flag(column))} THEN raise_error("
            f"{_sql_text(_lost(table, column))}) ELSE {value} END")


def rows_sql(view: str, columns: Sequence[str], toast: Mapping[str, int], table: str) -> str:
    """The rows ``view`` sets, as the mirror's ``columns`` in its order: added to the mirror
    (a table without a key: its INSERTs) or, for a batch with a TRUNCATE, replacing it. An
    unchanged TOAST value has nothing to come from in a new row: the statement fails, as in
    :func:`merge_sql`."""
    values = [_SYSTEM.get(c) or _new_value(c, toast, table) for c in columns]
    return f"SELECT {', '.join(values)} FROM {view} s WHERE s._kind = '{_SET}'"


def append_since(spark: SparkSession, target: str, rows: str, columns: Sequence[str],
                 snapshot: int | None) -> None:
    """Append the result of ``rows`` to ``target`` in one commit that Iceberg refuses when
    anything was committed to the table after ``snapshot`` (None: the table had none).

    A plain append validates nothing: of two merges of one batch that both read the mirror's
    commit LSN before either committed (one lost the lake lease and went on), both would add
    the rows. So the rows go in as an overwrite that deletes nothing — Spark's
    ``overwrite(false)`` is Iceberg's ``OverwriteFiles`` with row filter ``false`` — with the
    write options ``isolation-level = serializable`` and ``validate-from-snapshot-id``: the
    commit then checks that no data file was added since that snapshot (the conflict filter
    of an overwrite that deletes nothing is ``true``), and fails with a ValidationException
    otherwise. Compaction (``replace``) does not conflict."""
    from pyspark.sql import functions as F

    writer = (spark.sql(rows).toDF(*columns).writeTo(target)
              .option("isolation-level", "serializable"))
    if snapshot is not None:
        writer = writer.option("validate-from-snapshot-id", str(snapshot))
    writer.overwrite(F.lit(False))


def merge_sql(target: str, view: str, keys: Sequence[str], columns: Sequence[str],
              toast: Mapping[str, int], table: str) -> str:
    """The MERGE INTO applying the reduced changes in ``view`` to ``target`` (the mirror of
    source ``table``); ``toast``: the columns some change left unchanged, with their attnums.

    A kept TOAST value keeps its exact text too, if the mirror holds it as one
    (``_cdc_pg_text`` is keyed by attnum); every other value of the batch is typed (batches
    with texts go to the pyiceberg merge). A row whose unchanged TOAST value is neither in the
    batch nor in the mirror stops the statement (nothing commits), as the pyiceberg merge
    stops: its value is nowhere to take from, and a null would be a lie."""
    on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
    values = {c: (f"CASE WHEN s.{_q(_flag(c))} THEN t.{_q(c)} ELSE s.{_q(c)} END"
                  if c in toast else f"s.{_q(c)}") for c in columns}
    texts = _SYSTEM
    if toast:
        kept = " OR ".join(f"(k = '{a}' AND s.{_q(_flag(c))})" for c, a in sorted(toast.items()))
        left = f"map_filter(t.{CDC_PG_TEXT}, (k, v) -> {kept})"
        texts = {**_SYSTEM, CDC_PG_TEXT: f"CASE WHEN size({left}) > 0 THEN {left} END"}
    update = ", ".join(f"t.{_q(c)} = {v}" for c, v in {**values, **texts}.items())
    inserted = {c: _new_value(c, toast, table) for c in columns} | _SYSTEM
    return (f"MERGE INTO {target} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s._kind = '{_DEL}' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND s._kind = '{_SET}' THEN INSERT "
            f"({', '.join(_q(c) for c in inserted)}) VALUES ({', '.join(inserted.values())})")


_LOST = "cdclake: lost TOAST: "


def _lost(table: str, column: str) -> str:
    return (f"{_LOST}table {table}: an UPDATE left the TOASTed column {column} unchanged, but "
            f"the row is not in the mirror to take its value from; snapshot the table again: "
            f"cdclake snapshot --tables {table}")


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def with_commit_properties(spark: SparkSession, properties: Mapping[str, str],
                           run: Callable[[], object]) -> None:
    """Run ``run`` (a Spark SQL write) with ``properties`` in its Iceberg snapshot summary.

    Iceberg's Spark writes add ``CommitMetadata.commitProperties()`` to the snapshot they
    commit; that is a thread-local its ``withCommitProperties`` sets around a Java callable.
    PySpark pins each Python thread to one JVM thread, so setting the thread-local from here
    (the Java method would need a Python callback) reaches the commit of the statement this
    thread runs next. Spark 3.5's session conf ``spark.sql.iceberg.snapshot-property.*`` does
    not reach SQL MERGE commits.
    """
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "a stopped SparkContext"
    try:
        holder = (jvm.java.lang.Class.forName("org.apache.iceberg.spark.CommitMetadata")
                  .getDeclaredField("COMMIT_PROPERTIES"))
        holder.setAccessible(True)
        local = holder.get(None)
    except Exception as exc:
        raise LakeError(f"this Iceberg Spark runtime has no CommitMetadata commit properties "
                        f"({error_line(exc)}); the merge needs Iceberg 1.4 or later") from exc
    values = jvm.java.util.HashMap()
    for k, v in properties.items():
        values.put(k, v)
    local.set(values)
    try:
        run()
    finally:
        local.remove()


def _spark_name(config: Config, ident: tuple[str, str]) -> str:
    return ".".join(_q(p) for p in (config.catalog_name, *ident))


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _old(name: str) -> str:
    return f"_old_{name}"


def _flag(name: str) -> str:
    return f"_unchanged_{name}"

