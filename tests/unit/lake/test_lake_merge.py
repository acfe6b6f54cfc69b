"""Merging batches into Iceberg mirrors, read back through DuckDB (a reader we did not write)."""

from __future__ import annotations

import json
import re
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from cdclake.catalog.model import IDENTITY_FULL, IDENTITY_NOTHING
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.batch import Batch, TableEntry, read_batch
from cdclake.lake.merge import MergeReport, TableReport, merge_batch, mirror_identifier
from cdclake.lake.watermark import COMMIT_LSN, STREAM
from tests.support.duck import rows as duck_rows
from tests.support.streamgen import BatchBuilder, Rel, Stream, relation

BIG = "x" * 5000  # stands for a TOASTed value


def items() -> Rel:
    return relation("items", [("id", pa.int32()), ("name", pa.string()), ("qty", pa.int64())],
                    key=["id"])


def run(catalog: Catalog, config: Config, b: BatchBuilder, **kw: Any) -> MergeReport:
    b.write()
    report = merge_batch(catalog, config, read_batch(b.stream.root, b.name), **kw)
    json.dumps(report.to_json())  # the report must be JSON-serialisable
    return report


def failure(report: MergeReport, table: str) -> str:
    """The error line of ``table``, the one table whose merge failed: the others went on, and
    the stream's merged end LSN stayed where it was (the batch stays pending)."""
    assert [f["table"] for f in report.failed] == [table], report.failed
    assert report.end_lsn == report.previous_end_lsn
    return str(report.failed[0]["error"])


def mirror(catalog: Catalog, config: Config, name: str = "items") -> Table:
    return catalog.load_table(mirror_identifier(config, "public", name))


def data(table: Table, con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    cols = [f.name for f in table.schema().fields if not f.name.startswith("_cdc_")]
    return duck_rows(table, cols, con)


def test_inserts(catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    rel = items()
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "name": "a", "qty": 10})
        t.insert(rel, {"id": 2, "name": "b", "qty": None})
    with b.txn() as t:
        t.insert(rel, {"id": 3, "name": "c", "qty": 30})
    report = run(catalog, config, b)
    table = mirror(catalog, config)
    assert data(table, duck) == [{"id": 1, "name": "a", "qty": 10},
                                 {"id": 2, "name": "b", "qty": None},
                                 {"id": 3, "name": "c", "qty": 30}]
    (r,) = report.tables
    assert (r.inserted, r.updated, r.deleted, r.rows_written) == (3, 0, 0, 3)
    assert r.mirror == "cdc.public__items" and r.strategy == "append"
    lsns = {row["id"]: row["_cdc_commit_lsn"] for row in duck_rows(table, None, duck)}
    assert lsns[1] == lsns[2] < lsns[3] == r.commit_lsn
    summary = table.current_snapshot().summary.additional_properties
    assert summary[COMMIT_LSN] == str(r.commit_lsn) and summary[STREAM] == "test"


def test_updates_and_deletes_across_batches(catalog: Catalog, config: Config, stream: Stream,
                                            duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for i in range(1, 6):
            t.insert(rel, {"id": i, "name": f"n{i}", "qty": i})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 2, "name": "two", "qty": 22})
        t.delete(rel, {"id": 4})
    report = run(catalog, config, b2)
    assert data(mirror(catalog, config), duck) == [
        {"id": 1, "name": "n1", "qty": 1}, {"id": 2, "name": "two", "qty": 22},
        {"id": 3, "name": "n3", "qty": 3}, {"id": 5, "name": "n5", "qty": 5}]
    (r,) = report.tables
    assert (r.updated, r.deleted, r.not_found, r.strategy) == (1, 1, 0, "region")


def test_key_changing_update_removes_old_key(catalog: Catalog, config: Config, stream: Stream,
                                             duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "name": "a", "qty": 1})
        t.insert(rel, {"id": 2, "name": "b", "qty": 2})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 10, "name": "a", "qty": 1}, old={"id": 1})
        # and a swap through a free key, inside the batch
        t.update(rel, {"id": 11, "name": "b", "qty": 2}, old={"id": 2})
        t.update(rel, {"id": 2, "name": "b2", "qty": 2}, old={"id": 11})
    run(catalog, config, b2)
    assert data(mirror(catalog, config), duck) == [{"id": 2, "name": "b2", "qty": 2},
                                                   {"id": 10, "name": "a", "qty": 1}]


def test_same_key_many_times_in_one_batch(catalog: Catalog, config: Config, stream: Stream,
                                          duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 7, "name": "orig", "qty": 0})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    for q in range(1, 6):
        with b2.txn() as t:
            t.update(rel, {"id": 7, "name": f"v{q}", "qty": q})
    with b2.txn() as t:
        t.delete(rel, {"id": 7})
        t.insert(rel, {"id": 7, "name": "again", "qty": 100})
    with b2.txn() as t:
        t.update(rel, {"id": 7, "name": "last", "qty": 101})
        t.insert(rel, {"id": 8, "name": "gone", "qty": 1})
        t.delete(rel, {"id": 8})
    report = run(catalog, config, b2)
    table = mirror(catalog, config)
    assert data(table, duck) == [{"id": 7, "name": "last", "qty": 101}]
    (r,) = report.tables
    assert (r.inserted, r.updated, r.deleted, r.rows_written) == (2, 6, 2, 1)
    (row,) = duck_rows(table, None, duck)
    assert row["_cdc_commit_lsn"] == r.commit_lsn


def toasty() -> Rel:
    return relation("docs", [("id", pa.int64()), ("body", pa.string()), ("v", pa.int32())],
                    key=["id"])


def test_unchanged_toast_keeps_stored_value_across_batches(catalog: Catalog, config: Config,
                                                           stream: Stream, duck: Any) -> None:
    rel = toasty()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "body": BIG, "v": 1})
        t.insert(rel, {"id": 2, "body": BIG + "2", "v": 1})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 1, "body": None, "v": 2}, unchanged=["body"])
        # a key change that leaves the TOASTed value alone moves it to the new key
        t.update(rel, {"id": 20, "body": None, "v": 2}, old={"id": 2}, unchanged=["body"])
    with b2.txn() as t:
        t.update(rel, {"id": 20, "body": None, "v": 3}, unchanged=["body"])
    run(catalog, config, b2)
    assert data(mirror(catalog, config, "docs"), duck) == [
        {"id": 1, "body": BIG, "v": 2}, {"id": 20, "body": BIG + "2", "v": 3}]


def test_unchanged_toast_within_a_batch_after_insert(catalog: Catalog, config: Config,
                                                     stream: Stream, duck: Any) -> None:
    rel = toasty()
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "body": BIG, "v": 1})
    with b.txn() as t:
        t.update(rel, {"id": 1, "body": None, "v": 2}, unchanged=["body"])
        t.update(rel, {"id": 1, "body": None, "v": 3}, unchanged=["body"])
    run(catalog, config, b)
    assert data(mirror(catalog, config, "docs"), duck) == [{"id": 1, "body": BIG, "v": 3}]


def test_unchanged_toast_without_a_stored_row_is_an_error(catalog: Catalog, config: Config,
                                                          stream: Stream) -> None:
    rel = toasty()
    b = stream.batch("b1")
    with b.txn() as t:
        t.update(rel, {"id": 5, "body": None, "v": 2}, unchanged=["body"])
    assert re.search(r"public\.docs.*TOASTed.*not in the mirror",
                     failure(run(catalog, config, b), "public.docs"))


def full_rel() -> Rel:
    return relation("events", [("kind", pa.string()), ("n", pa.int32()),
                               ("tags", pa.list_(pa.string()))], replident=IDENTITY_FULL)


def test_full_identity_deletes_one_of_two_identical_rows(catalog: Catalog, config: Config,
                                                         stream: Stream, duck: Any) -> None:
    rel = full_rel()
    row = {"kind": "click", "n": 1, "tags": ["a", None]}
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, row)
        t.insert(rel, row)
        t.insert(rel, {"kind": "view", "n": None, "tags": None})
        t.insert(rel, {"kind": "view", "n": None, "tags": None})
        t.insert(rel, {"kind": "other", "n": 1, "tags": ["a", None]})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.delete(rel, row)
        t.update(rel, {"kind": "view", "n": 5, "tags": None},
                 old={"kind": "view", "n": None, "tags": None})
    report = run(catalog, config, b2)
    assert data(mirror(catalog, config, "events"), duck) == [
        {"kind": "click", "n": 1, "tags": ["a", None]},
        {"kind": "other", "n": 1, "tags": ["a", None]},
        {"kind": "view", "n": 5, "tags": None},
        {"kind": "view", "n": None, "tags": None}]
    assert report.tables[0].not_found == 0


def test_full_identity_duplicates_within_one_batch(catalog: Catalog, config: Config,
                                                   stream: Stream, duck: Any) -> None:
    rel = full_rel()
    row = {"kind": "k", "n": 2, "tags": []}
    b = stream.batch("b1")
    with b.txn() as t:
        for _ in range(3):
            t.insert(rel, row)
    with b.txn() as t:
        t.delete(rel, row)
        t.delete(rel, row)
    run(catalog, config, b)
    assert data(mirror(catalog, config, "events"), duck) == [row]


def test_identity_nothing_is_counted_not_applied(catalog: Catalog, config: Config,
                                                 stream: Stream, duck: Any) -> None:
    rel = relation("logs", [("msg", pa.string()), ("lvl", pa.int16())],
                   replident=IDENTITY_NOTHING)
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"msg": "a", "lvl": 1})
        t.insert(rel, {"msg": "a", "lvl": 1})
        t.update(rel, {"msg": "b", "lvl": 2})
        t.delete(rel, {"msg": "a", "lvl": 1})
    report = run(catalog, config, b)
    (r,) = report.tables
    assert (r.inserted, r.updated, r.deleted, r.identity_nothing) == (2, 0, 0, 2)
    assert data(mirror(catalog, config, "logs"), duck) == [{"msg": "a", "lvl": 1}] * 2
    # the counted changes are not re-counted by a re-run
    again = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    assert again.tables[0].identity_nothing == 0
    assert again.tables[0].skipped_applied == 4


def test_default_identity_without_primary_key_is_nothing(catalog: Catalog, config: Config,
                                                         stream: Stream, duck: Any) -> None:
    rel = relation("nopk", [("a", pa.int32())])  # DEFAULT identity, no key columns
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"a": 1})
        t.delete(rel, {"a": 1})
    report = run(catalog, config, b)
    assert report.tables[0].identity_nothing == 1
    assert data(mirror(catalog, config, "nopk"), duck) == [{"a": 1}]


def test_truncate_then_inserts_in_the_same_batch(catalog: Catalog, config: Config,
                                                 stream: Stream, duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for i in range(1, 4):
            t.insert(rel, {"id": i, "name": "old", "qty": i})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 1, "name": "before-truncate", "qty": 1})
        t.insert(rel, {"id": 9, "name": "before-truncate", "qty": 9})
    with b2.txn() as t:
        t.truncate(rel)
    with b2.txn() as t:
        t.insert(rel, {"id": 1, "name": "new", "qty": 1})
        t.insert(rel, {"id": 2, "name": "new", "qty": 2})
        t.update(rel, {"id": 2, "name": "newer", "qty": 2})
    report = run(catalog, config, b2)
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "new", "qty": 1},
                                                   {"id": 2, "name": "newer", "qty": 2}]
    (r,) = report.tables
    assert (r.truncated, r.inserted, r.updated, r.strategy) == (1, 3, 2, "truncate")


def test_rerun_creates_no_snapshot(catalog: Catalog, config: Config, stream: Stream,
                                   duck: Any) -> None:
    rel = items()
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "name": "a", "qty": 1})
        t.update(rel, {"id": 1, "name": "b", "qty": 2})
    first = run(catalog, config, b)
    table = mirror(catalog, config)
    snapshots = [s.snapshot_id for s in table.snapshots()]
    second = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    table = mirror(catalog, config)
    assert [s.snapshot_id for s in table.snapshots()] == snapshots
    (r,) = second.tables
    assert r.skipped_applied == 2 and r.inserted == r.updated == 0
    assert r.snapshot_id == first.tables[0].snapshot_id
    assert r.commit_lsn == first.tables[0].commit_lsn == r.previous_lsn
    assert data(table, duck) == [{"id": 1, "name": "b", "qty": 2}]


def test_a_table_failing_after_another_committed_then_rerun(
        catalog: Catalog, config: Config, stream: Stream, duck: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = items()
    d = relation("docs", [("id", pa.int64()), ("body", pa.string()), ("v", pa.int32())],
                 key=["id"], oid=16500)
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(a, {"id": 1, "name": "a", "qty": 1})
        t.insert(d, {"id": 1, "body": "d", "v": 1})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(a, {"id": 2, "name": "a2", "qty": 2})
        t.update(a, {"id": 1, "name": "a1", "qty": 1})
        t.insert(d, {"id": 2, "body": "d2", "v": 2})
        t.delete(d, {"id": 1})
    b2.write()

    arrow = ArrowMerge(catalog, config)
    calls = []

    class CrashOnSecond:
        """An engine that fails on its second table (an unforeseen error, as a bug would)."""

        name = "pyiceberg"

        def merge_table(self, batch: Batch, entry: TableEntry, **kw: Any) -> TableReport:
            calls.append(entry.table)
            if len(calls) == 2:
                raise RuntimeError("simulated crash")
            return arrow.merge_table(batch, entry, **kw)

    failed = merge_batch(catalog, config, read_batch(stream.root, "b2"), engine=CrashOnSecond())
    assert failure(failed, "public.docs") == "internal error: RuntimeError: simulated crash"
    assert [t.table for t in failed.tables] == ["public.items"]  # committed
    assert calls == ["public.items", "public.docs"]
    report = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    by_table = {r.table: r for r in report.tables}
    assert by_table["public.items"].skipped_applied == 2
    assert by_table["public.items"].inserted == 0
    assert by_table["public.docs"].skipped_applied == 0
    assert (by_table["public.docs"].inserted, by_table["public.docs"].deleted) == (1, 1)
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "a1", "qty": 1},
                                                   {"id": 2, "name": "a2", "qty": 2}]
    assert data(mirror(catalog, config, "docs"), duck) == [{"id": 2, "body": "d2", "v": 2}]


def test_composite_key_region_writes_back_untouched_rows(catalog: Catalog, config: Config,
                                                         stream: Stream, duck: Any) -> None:
    rel = relation("grid", [("x", pa.int32()), ("y", pa.string()), ("v", pa.int32())],
                   key=["x", "y"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for x in (1, 2, 3):
            for y in ("a", "b"):
                t.insert(rel, {"x": x, "y": y, "v": 0})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"x": 1, "y": "a", "v": 1})  # the filter x IN (1,2) AND y IN (a,b)
        t.delete(rel, {"x": 2, "y": "b"})  # also catches (1,b) and (2,a): written back
    report = run(catalog, config, b2)
    assert report.tables[0].strategy == "region"
    assert data(mirror(catalog, config, "grid"), duck) == [
        {"x": 1, "y": "a", "v": 1}, {"x": 1, "y": "b", "v": 0}, {"x": 2, "y": "a", "v": 0},
        {"x": 3, "y": "a", "v": 0}, {"x": 3, "y": "b", "v": 0}]


def test_full_table_fallback_gives_the_same_result(catalog: Catalog, config: Config,
                                                   stream: Stream, duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for i in range(10):
            t.insert(rel, {"id": i, "name": "n", "qty": i})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 3, "name": "m", "qty": 3})
        t.delete(rel, {"id": 4})
        t.update(rel, {"id": 50, "name": "moved", "qty": 5}, old={"id": 5})
    report = run(catalog, config, b2, engine=ArrowMerge(catalog, config, max_filter_keys=2))
    assert report.tables[0].strategy == "full-scan"
    expected = [{"id": i, "name": "n", "qty": i} for i in range(10) if i not in (3, 4, 5)]
    expected += [{"id": 3, "name": "m", "qty": 3}, {"id": 50, "name": "moved", "qty": 5}]
    assert data(mirror(catalog, config), duck) == sorted(expected, key=lambda r: r["id"])


def test_changelog_appends_stream_rows_once(catalog: Catalog, config: Config, stream: Stream,
                                            duck: Any) -> None:
    rel = toasty()
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "body": BIG, "v": 1})
        t.update(rel, {"id": 1, "body": None, "v": 2}, unchanged=["body"])
        t.delete(rel, {"id": 1})
    report = run(catalog, config, b, changelog=True)
    assert report.changelogs[0]["appended"] == 3
    again = merge_batch(catalog, config, read_batch(stream.root, "b1"), changelog=True)
    assert again.changelogs[0]["appended"] == 0
    table = catalog.load_table(("cdc", "public__docs__changelog"))
    got = sorted(duck_rows(table, None, duck), key=lambda r: r["_cdc_lsn"])
    assert [r["_cdc_op"] for r in got] == ["I", "U", "D"]
    assert [r["_cdc_unchanged_toast"] for r in got] == [None, ["body"], None]
    assert got[2]["_cdc_old_key"] == '{"id": 1}'
    assert [r["body"] for r in got] == [BIG, None, None]
    assert data(mirror(catalog, config, "docs"), duck) == []


def test_source_table_rename_keeps_the_mirror(catalog: Catalog, config: Config,
                                              stream: Stream, duck: Any) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "name": "a", "qty": 1})
    run(catalog, config, b1)
    renamed = Rel(rel.version.__class__(**{**rel.version.to_json(), "name": "goods",
                                           "columns": rel.version.columns,
                                           "valid_from": 0x2000000}), rel.types)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(renamed, {"id": 2, "name": "b", "qty": 2})
    report = run(catalog, config, b2)
    assert report.tables[0].mirror == "cdc.public__goods"
    assert not catalog.table_exists(("cdc", "public__items"))
    assert data(mirror(catalog, config, "goods"), duck) == [{"id": 1, "name": "a", "qty": 1},
                                                            {"id": 2, "name": "b", "qty": 2}]


def test_recreated_source_table_is_refused(catalog: Catalog, config: Config,
                                           stream: Stream) -> None:
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(items(), {"id": 1, "name": "a", "qty": 1})
    run(catalog, config, b1)
    again = relation("items", [("id", pa.int32()), ("name", pa.string()), ("qty", pa.int64())],
                     key=["id"], oid=17000)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(again, {"id": 1, "name": "a", "qty": 1})
    assert re.search(r"cdc\.public__items mirrors relation oid 16400.*17000",
                     failure(run(catalog, config, b2), "public.items"))


def test_tables_not_configured_are_excluded(catalog: Catalog, config: Config,
                                            stream: Stream) -> None:
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(items(), {"id": 1, "name": "a", "qty": 1})
    report = run(catalog, config.replace(tables=["public.other"]), b)
    assert report.excluded == ["public.items"] and report.tables == []
    assert not catalog.table_exists(("cdc", "public__items"))


def test_missing_batch_in_between_is_refused(catalog: Catalog, config: Config, stream: Stream,
                                             duck: Any) -> None:
    rel = items()
    builders = []
    for n in range(3):
        b = stream.batch(f"b{n}")
        with b.txn() as t:
            t.insert(rel, {"id": n, "name": f"n{n}", "qty": n})
        b.write()
        builders.append(b)
    merge_batch(catalog, config, read_batch(stream.root, "b0"))
    with pytest.raises(LakeError, match=r"batch b2 starts at LSN 0/.*merged only up to 0/.*"
                                        r"a batch in between is missing"):
        merge_batch(catalog, config, read_batch(stream.root, "b2"))
    assert data(mirror(catalog, config), duck) == [{"id": 0, "name": "n0", "qty": 0}]
    for name in ("b1", "b2", "b0"):  # in order, then a replay of an old batch: a no-op
        report = merge_batch(catalog, config, read_batch(stream.root, name))
    assert report.end_lsn == report.previous_end_lsn == builders[2].stream.lsn
    assert [r["id"] for r in data(mirror(catalog, config), duck)] == [0, 1, 2]
