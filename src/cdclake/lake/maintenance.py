"""Table maintenance with Iceberg's own Spark procedures, the stream's watermark kept.

Every merge commits new data files and a snapshot; left alone, a mirror collects small files,
manifests and snapshots without end. Per table of the namespace this runs Iceberg's Spark
procedures: ``rewrite_data_files`` (small files into ``write.target-file-size-bytes``),
``rewrite_position_delete_files``, ``rewrite_manifests``, ``expire_snapshots`` and
``remove_orphan_files``.

The merge's exactly-once rests on ``cdclake.commit-lsn`` in the summaries of the table's
snapshots (:mod:`cdclake.lake.watermark`); a rewrite's snapshot carries none, and expiring
snapshots can remove every one that did. So before anything is rewritten or expired the
table's watermark is also written into its properties, which
:func:`~cdclake.lake.watermark.committed_lsn` reads when no snapshot in the table's ancestry
has one. Run under the stream's lake lease, so no merge commits meanwhile.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog import Catalog
from pyiceberg.schema import index_by_id
from pyiceberg.table import Table
from pyiceberg.types import TimeType

from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.watermark import committed_lsn, watermark_properties
from cdclake.sparkenv.tasks import error_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: the youngest unreferenced file ``remove_orphan_files`` may delete
ORPHAN_MIN_AGE = timedelta(hours=24)


@dataclass
class TableMaintenance:
    """What maintenance did to one table (counts from the procedures' own results)."""

    table: str
    data_files_before: int
    data_files_after: int
    snapshots_before: int
    snapshots_after: int
    rewritten_data_files: int = 0
    added_data_files: int = 0
    rewritten_delete_files: int = 0
    rewritten_manifests: int = 0
    expired_data_files: int = 0
    orphan_files: int = 0
    watermark: int | None = None
    skipped: str | None = None  #: why the table was left alone

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def maintain_tables(config: Config, catalog: Catalog, spark: SparkSession, *,
                    retain_last: int, older_than: timedelta,
                    tables: list[str] | None = None) -> list[TableMaintenance]:
    """Maintain every table of ``config.namespace`` (or those named ``namespace.table`` in
    ``tables``): snapshots older than ``older_than`` beyond the newest ``retain_last`` are
    expired, files no snapshot references and older than ``older_than`` (at least
    :data:`ORPHAN_MIN_AGE`) are removed."""
    if retain_last < 1:
        raise LakeError(f"retain_last must be at least 1, got {retain_last}")
    if not catalog.namespace_exists(config.namespace):
        return []
    names = sorted(".".join(ident) for ident in catalog.list_tables(config.namespace))
    if tables:
        unknown = sorted(set(tables) - set(names))
        if unknown:
            raise LakeError(f"no table {', '.join(unknown)} in namespace {config.namespace} "
                            f"of catalog {config.catalog_name}")
        names = [n for n in names if n in tables]
    return [_maintain(config, catalog, spark, name, retain_last, older_than) for name in names]


def _before(age: timedelta) -> str:
    """The SQL timestamp ``age`` ago (UTC, the session's time zone)."""
    return (datetime.now(UTC) - age).strftime("%Y-%m-%d %H:%M:%S.%f")


def _maintain(config: Config, catalog: Catalog, spark: SparkSession, name: str,
              retain_last: int, older_than: timedelta) -> TableMaintenance:
    table = catalog.load_table(name)
    report = TableMaintenance(name, _data_files(table), _data_files(table),
                              len(table.metadata.snapshots), len(table.metadata.snapshots))
    if table.current_snapshot() is None:
        return report
    if any(isinstance(f.field_type, TimeType) for f in index_by_id(table.schema()).values()):
        # Spark 3.5 has no time type: it cannot load such a table at all
        report.skipped = "Spark cannot read its time column(s)"
        log.warning("maintenance skips %s: %s", name, report.skipped)
        return report
    report.watermark = committed_lsn(table, config.stream)
    quoted = _literal_name(name)
    proc = f"{config.catalog_name}.system"
    if report.watermark is not None:
        # through Spark, like every other commit here: its catalog connection holds SQLite's
        # shared lock between statements, so a pyiceberg commit beside it would block
        props = ", ".join(f"'{k}' = '{v}'" for k, v in
                          watermark_properties(config.stream, report.watermark).items())
        _call(spark, name, f"ALTER TABLE {_identifier(config.catalog_name, *name.split('.'))} "
                           f"SET TBLPROPERTIES ({props})")
    row = _one(_call(spark, name, f"CALL {proc}.rewrite_data_files(table => '{quoted}', "
                                  "options => map('min-input-files', '2'))"))
    report.rewritten_data_files = int(row.get("rewritten_data_files_count", 0))
    report.added_data_files = int(row.get("added_data_files_count", 0))
    row = _one(_call(spark, name,
                    f"CALL {proc}.rewrite_position_delete_files(table => '{quoted}')"))
    report.rewritten_delete_files = int(row.get("rewritten_delete_files_count", 0))
    row = _one(_call(spark, name, f"CALL {proc}.rewrite_manifests(table => '{quoted}')"))
    report.rewritten_manifests = int(row.get("rewritten_manifests_count", 0))
    row = _one(_call(spark, name, f"CALL {proc}.expire_snapshots(table => '{quoted}', "
                                  f"older_than => TIMESTAMP '{_before(older_than)}', "
                                  f"retain_last => {retain_last})"))
    report.expired_data_files = int(row.get("deleted_data_files_count", 0))
    # remove_orphan_files refuses younger files: one still being written would look orphaned
    orphans_before = _before(max(older_than, ORPHAN_MIN_AGE))
    report.orphan_files = len(_call(spark, name, f"CALL {proc}.remove_orphan_files(table => "
                                                 f"'{quoted}', older_than => "
                                                 f"TIMESTAMP '{orphans_before}')"))
    table = catalog.load_table(name)
    report.data_files_after = _data_files(table)
    report.snapshots_after = len(table.metadata.snapshots)
    if committed_lsn(table, config.stream) != report.watermark:
        raise LakeError(f"maintenance of {name} lost its watermark (was "
                        f"{report.watermark}); restore the table's previous metadata")
    return report


def _call(spark: SparkSession, table: str, sql: str) -> list[dict[str, Any]]:
    """A procedure's result rows; Spark's exceptions become one :class:`LakeError` line
    naming the table and the procedure."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        rows = [r.asDict() for r in spark.sql(sql).collect()]
    except (PySparkException, Py4JError) as exc:
        what = sql.split("(", 1)[0].removeprefix("CALL ").split(" SET ")[0]
        raise LakeError(f"maintenance of {table}: {what} failed: {error_line(exc)}") from exc
    return rows


def _one(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return rows[0] if rows else {}


def _data_files(table: Table) -> int:
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-data-files", 0))


def _identifier(*parts: str) -> str:
    """A multi-part SQL identifier, each part in backticks (a mirror's name may hold any
    character its source table's name does)."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def _literal_name(name: str) -> str:
    """``namespace.table`` as the string procedures take, escaped for a SQL literal."""
    return _identifier(*name.split(".")).replace("'", "''")
