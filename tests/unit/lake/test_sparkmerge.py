"""The Spark merge's pure parts: which batches it takes, the MERGE statement, uuid as text.

The MERGE itself runs against real Spark and PostgreSQL in tests/e2e/lake/test_spark_merge.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog

from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.batch import Batch, TableEntry, read_batch
from cdclake.lake.reports import TableReport
from cdclake.lake.sparkmerge import (
    BatchStats,
    SparkMerge,
    data_reason,
    merge_sql,
    rows_sql,
)
from cdclake.lake.sparkparts import ready_column, spark_ready
from tests.support.streamgen import Stream, relation
from tests.unit.lake.test_lake_merge import mirror, run


def stats(**kw: object) -> BatchStats:
    base = {"rows": 3, "ops": {"I": 2, "U": 1, "D": 0}, "texts": 0, "toast_moves": 0,
            "keyless": 0, "min_commit": 100, "max_commit": 200, "in_snapshot": 0,
            "toast": frozenset()}
    return BatchStats(**{**base, **kw})  # type: ignore[arg-type]


def test_row_changes_are_taken() -> None:
    assert data_reason(stats()) == ""
    # the changes an initial snapshot holds are dropped on Spark (visibility.in_snapshot)
    assert data_reason(stats(in_snapshot=5)) == ""


def test_rewrites_texts_and_toast_moves_are_left_to_pyiceberg() -> None:
    assert data_reason(stats(ops={"I": 1, stream.OP_TRUNCATE: 1})) == ""  # overwrite
    assert "W" in data_reason(stats(ops={stream.OP_REWRITE_BEGIN: 1, stream.OP_REWRITE: 4}))
    assert "exact text" in data_reason(stats(texts=2))
    assert "TOAST" in data_reason(stats(toast_moves=1))
    assert "without a replica identity" in data_reason(stats(keyless=2))


def test_a_type_change_no_promotion_holds_is_left_to_pyiceberg_before_any_commit(
        catalog: Catalog, config: Config, stream: Stream) -> None:
    """The Spark path commits a schema change apart from its MERGE: a column replaced there
    would be empty (or hold the old type's values) for a commit. It names the change and
    commits nothing, before it needs Spark at all; pyiceberg merges the table."""
    v1 = relation("t", [("id", pa.int32()), ("n", pa.string())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": "7"})
    run(catalog, config, b1)
    metadata = mirror(catalog, config, "t").metadata_location
    v2 = v1.evolve(0x2000000, retype={"n": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.rewrite(v2, [{"id": 1, "n": 7}])
    b2.write()
    batch = read_batch(stream.root, "b2")
    arrow = ArrowMerge(catalog, config)
    handed_over = []  # the mirror's metadata when the fallback got the table

    class Fallback:
        name = "pyiceberg"

        def merge_table(self, batch: Batch, entry: TableEntry, **kw: Any) -> TableReport:
            handed_over.append(mirror(catalog, config, "t").metadata_location)
            return arrow.merge_table(batch, entry, **kw)

    engine = SparkMerge(None, catalog, config, fallback=Fallback())  # type: ignore[arg-type]
    report = engine.merge_table(batch, batch.entries[0])
    assert report.fallback == ("column n (attnum 2) changed type from string to int, which "
                               "Iceberg cannot promote (replaced in the commit that writes its "
                               "new values)")
    assert handed_over == [metadata]  # Spark committed nothing before it declined
    assert report.engine == "pyiceberg" and report.rewritten == 1
    assert mirror(catalog, config, "t").scan(selected_fields=("id", "n")).to_arrow(
        ).to_pylist() == [{"id": 1, "n": 7}]


def test_merge_sql_deletes_updates_and_inserts_by_key() -> None:
    sql = merge_sql("`c`.`ns`.`t`", "v", ["id"], ["id", "body", "we`ird"], {"body": 2},
                    "public.t")
    assert sql.startswith("MERGE INTO `c`.`ns`.`t` t USING v s ON t.`id` = s.`id` ")
    assert "WHEN MATCHED AND s._kind = 'del' THEN DELETE" in sql
    # an unchanged TOAST value keeps the mirror's
    assert ("t.`body` = CASE WHEN s.`_unchanged_body` THEN t.`body` ELSE s.`body` END"
            in sql)
    assert "t.`we``ird` = s.`we``ird`" in sql
    assert "t.`_cdc_commit_lsn` = s._commit_lsn" in sql
    # the kept value's exact text (if the mirror has one) is kept, the others cleared
    assert ("t.`_cdc_pg_text` = CASE WHEN size(map_filter(t._cdc_pg_text, (k, v) -> "
            "(k = '2' AND s.`_unchanged_body`))) > 0 THEN") in sql
    assert merge_sql("t", "v", ["id"], ["id", "n"], {}, "public.t").count(
        "`_cdc_pg_text` = NULL") == 1
    assert "WHEN NOT MATCHED AND s._kind = 'set' THEN INSERT" in sql
    assert sql.count("DELETE") == 1  # never a delete of unmatched rows
    # a new row whose unchanged TOAST value is nowhere: the statement fails, nothing commits
    assert ("CASE WHEN s.`_unchanged_body` THEN raise_error('cdclake: lost TOAST: table "
            "public.t: an UPDATE left the TOASTed column body unchanged") in sql
    assert "cdclake snapshot --tables public.t') ELSE s.`body` END" in sql


def test_uuid_goes_to_spark_as_text() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    raw = pa.array([u.bytes, None], pa.binary(16))
    assert spark_ready(raw.type) == pa.string()
    assert ready_column(raw, pa.string()).to_pylist() == [str(u), None]
    key = pa.StructArray.from_arrays([raw], names=["id"], mask=pa.array([False, True]))
    ready = ready_column(key, spark_ready(key.type))
    assert ready.to_pylist() == [{"id": str(u)}, None]


def test_rows_sql_keeps_the_mirrors_column_order() -> None:
    columns = ["id", "_cdc_commit_lsn", "_cdc_commit_ts", "_cdc_pg_text", "body"]
    sql = rows_sql("v", columns, {"body": 3}, "public.t")
    assert sql.startswith("SELECT s.`id`, s._commit_lsn, s._commit_ts, NULL, "
                          "CASE WHEN s.`_unchanged_body` THEN raise_error(")
    assert sql.endswith("FROM v s WHERE s._kind = 'set'")
    assert rows_sql("v", columns[:4], {}, "public.t") == (
        "SELECT s.`id`, s._commit_lsn, s._commit_ts, NULL FROM v s WHERE s._kind = 'set'")
