"""ADD/DROP/RENAME COLUMN and type changes: the mirror's schema follows the source by attnum."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, StringType

from cdclake.config import Config
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from cdclake.lake.schema import field_attnum
from cdclake.lake.tables import changelog_identifier
from tests.support.duck import rows as duck_rows
from tests.support.streamgen import Stream, relation
from tests.unit.lake.test_lake_merge import data, failure, mirror, run
from tests.unit.lake.test_lake_untypeable import ints, scan, texts_of, with_texts


def test_add_drop_rename_across_batches(catalog: Catalog, config: Config, stream: Stream,
                                        duck: Any) -> None:
    v1 = relation("t", [("id", pa.int32()), ("a", pa.string()), ("b", pa.int32()),
                        ("c", pa.int32())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "a": "a1", "b": 10, "c": 100})
        t.insert(v1, {"id": 2, "a": "a2", "b": 20, "c": 200})
    run(catalog, config, b1)
    before = {f.name: f.field_id for f in mirror(catalog, config, "t").schema().fields}

    # ALTER TABLE t RENAME a TO aa, DROP b, ADD d bigint DEFAULT 7, ALTER c TYPE bigint
    v2 = v1.evolve(0x2000000, rename={"a": "aa"}, drop=["b"], add=[("d", pa.int64())],
                   defaults={"d": "7"}, retype={"c": pa.int64()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(v2, {"id": 3, "aa": "a3", "c": 2**40, "d": 8})
        t.update(v2, {"id": 1, "aa": "a1*", "c": 101, "d": 7})
    report = run(catalog, config, b2)
    table = mirror(catalog, config, "t")
    fields = {f.name: f for f in table.schema().fields}
    assert fields["aa"].field_id == before["a"]  # a rename, not drop + add
    assert "b" not in fields and "a" not in fields
    assert field_attnum(fields["d"]) == 5 and fields["d"].field_type == LongType()
    assert fields["c"].field_type == LongType()
    assert report.tables[0].strategy == "full-rewrite"  # row 2 needs d's default written
    assert sorted(report.tables[0].schema_changes) == sorted([
        "drop column b (attnum 3)", "rename column a to aa (attnum 2)",
        "promote column c to long (attnum 4)", "add column d long (attnum 5)"])
    assert data(table, duck) == [
        {"id": 1, "aa": "a1*", "c": 101, "d": 7},
        {"id": 2, "aa": "a2", "c": 200, "d": 7},  # untouched: PostgreSQL's attmissingval
        {"id": 3, "aa": "a3", "c": 2**40, "d": 8}]

    # RENAME aa TO b (the dropped column's old name), ADD aa text: no name collision
    v3 = v2.evolve(0x3000000, rename={"aa": "b"}, add=[("aa", pa.string())])
    # and, later in the same batch, DROP d
    v4 = v3.evolve(0x3000100, drop=["d"])
    b3 = stream.batch("b3")
    with b3.txn() as t:
        t.update(v3, {"id": 2, "b": "a2", "c": 200, "d": 9, "aa": "new"})
    with b3.txn() as t:
        t.insert(v4, {"id": 4, "b": "b4", "c": 4, "aa": "x"})
    stream.lsn = max(stream.lsn, 0x3000100)
    run(catalog, config, b3)
    table = mirror(catalog, config, "t")
    fields = {f.name: f for f in table.schema().fields}
    assert fields["b"].field_id == before["a"]
    assert field_attnum(fields["aa"]) == 6 and fields["aa"].field_type == StringType()
    assert "d" not in fields
    assert data(table, duck) == [
        {"id": 1, "b": "a1*", "c": 101, "aa": None},
        {"id": 2, "b": "a2", "c": 200, "aa": "new"},
        {"id": 3, "b": "a3", "c": 2**40, "aa": None},
        {"id": 4, "b": "b4", "c": 4, "aa": "x"}]


def _ids(table: Table) -> dict[str, int]:
    return {f.name: f.field_id for f in table.schema().fields}


def _commits(table: Table) -> int:
    """Metadata files the table went through: one per commit."""
    return len(table.metadata.metadata_log)


def test_a_type_change_the_rewrite_carries_replaces_the_column_in_its_commit(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    """ALTER TABLE t ALTER id TYPE int USING id::int, ALTER n TYPE int USING n::int, ALTER v
    TYPE float8, ALTER w TYPE int (its mirror column holds int already): the rewrite's rows
    are the table under the new types. A field Iceberg cannot promote is replaced (a new
    field id, same name, attnum and place), the key's too, in the commit that writes those
    rows; a promotion stays one; changes around it in its transaction land in order."""
    v1 = relation("t", [("id", pa.string()), ("n", pa.string()), ("v", pa.float32()),
                        ("w", pa.int64())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for i in (1, 2, 3):
            t.insert(v1, {"id": str(i), "n": str(10 * i), "v": i / 2, "w": i})
    run(catalog, config, b1)
    before = mirror(catalog, config, "t")
    v2 = v1.evolve(0x2000000, retype={"id": pa.int32(), "n": pa.int32(), "v": pa.float64(),
                                      "w": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(v1, {"id": "3", "n": "33", "v": 1.5, "w": 3})
        t.rewrite(v2, [{"id": 1, "n": 10, "v": 0.5, "w": 1}, {"id": 2, "n": 20, "v": 1.0, "w": 2},
                       {"id": 3, "n": 33, "v": 1.5, "w": 3}])
        t.update(v2, {"id": 2, "n": 21, "v": 1.0, "w": 2})
        t.insert(v2, {"id": 4, "n": 40, "v": 2.0, "w": 4})
    with b2.txn() as t:
        t.delete(v2, {"id": 1})
    stream.lsn = max(stream.lsn, 0x2000000)
    report = run(catalog, config, b2)
    (r,) = report.tables
    assert sorted(r.schema_changes) == [
        "promote column v to double (attnum 3)",
        "replace column id by a new field id int (attnum 1)",
        "replace column n by a new field n int (attnum 2)"]
    assert (r.strategy, r.rewritten, r.updated, r.inserted, r.deleted) == (
        "rewrite", 3, 2, 1, 1)
    table = mirror(catalog, config, "t")
    assert _commits(table) == _commits(before) + 1  # no reader sees the new field empty
    old, new = _ids(before), _ids(table)
    assert new["id"] != old["id"] and new["n"] != old["n"]
    assert (new["v"], new["w"]) == (old["v"], old["w"])
    assert list(new) == list(old)  # the new fields take the old ones' places
    assert {f.name: str(f.field_type) for f in table.schema().fields[:4]} == {
        "id": "int", "n": "int", "v": "double", "w": "long"}
    assert [field_attnum(f) for f in table.schema().fields[:4]] == [1, 2, 3, 4]
    assert data(table, duck) == [{"id": 2, "n": 21, "v": 1.0, "w": 2},
                                 {"id": 3, "n": 33, "v": 1.5, "w": 3},
                                 {"id": 4, "n": 40, "v": 2.0, "w": 4}]
    again = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    assert again.tables[0].skipped_applied == 8 and _commits(
        mirror(catalog, config, "t")) == _commits(table)  # a re-run commits nothing


def test_a_type_change_without_a_rewrite_converts_the_stored_values(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    """ALTER k TYPE numeric (from numeric(10,2)), ALTER at TYPE timestamptz, ALTER back TYPE
    timestamp, under TimeZone UTC: PostgreSQL keeps the stored bytes and reads them under the
    new types, so the mirror's stored values are converted the same way — the key's too (a
    later UPDATE finds its row by the new type's value) — and exact text goes with them."""
    v1 = relation("t", [("k", pa.decimal128(10, 2)), ("at", pa.timestamp("us")),
                        ("back", pa.timestamp("us", tz="UTC"))], key=["k"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"k": Decimal("1.50"), "at": 10**15, "back": -(10**15)})
        t.insert(v1, {"k": Decimal("-2.00"), "at": 2**63 - 1, "back": None})
        t.insert(v1, {})
        with_texts(t, {1: "NaN", 2: "294270-01-01 00:00:00", 3: "294270-01-01 00:00:00+00"})
    run(catalog, config, b1)
    before = mirror(catalog, config, "t")
    v2 = v1.evolve(0x2000000, retype={"k": pa.string(), "at": pa.timestamp("us", tz="UTC"),
                                      "back": pa.timestamp("us")})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(v2, {"k": "1.50", "at": 10**15, "back": 5})
        t.insert(v2, {"k": "0.00000000000000000001", "at": 0, "back": 0})
    stream.lsn = max(stream.lsn, 0x2000000)
    report = run(catalog, config, b2)
    (r,) = report.tables
    assert (r.strategy, r.updated, r.not_found) == ("full-rewrite", 1, 0)
    assert sorted(r.schema_changes) == [
        "replace column at by a new field at timestamptz (attnum 2)",
        "replace column back by a new field back timestamp (attnum 3)",
        "replace column k by a new field k string (attnum 1)"]
    table = mirror(catalog, config, "t")
    assert _commits(table) == _commits(before) + 1
    got = scan(table, duck, order="k")
    assert got.select(["k"]).to_pylist() == [
        {"k": "-2.00"}, {"k": "0.00000000000000000001"}, {"k": "1.50"}, {"k": "NaN"}]
    assert ints(got.column("at")) == [2**63 - 1, 0, 10**15, None]
    assert ints(got.column("back")) == [None, 0, 5, None]
    assert texts_of(got) == [{}, {}, {}, {"2": "294270-01-01 00:00:00+00",
                                          "3": "294270-01-01 00:00:00"}]


def test_a_column_that_changes_type_and_back_in_one_batch(catalog: Catalog, config: Config,
                                                          stream: Stream, duck: Any) -> None:
    """int -> text -> int, each by a rewrite: only the last one's rows stay, and the field,
    an int again, keeps its id."""
    v1 = relation("t", [("id", pa.int32()), ("n", pa.int32())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": 1})
    run(catalog, config, b1)
    before = _ids(mirror(catalog, config, "t"))
    v2 = v1.evolve(0x2000000, retype={"n": pa.string()})
    v3 = v2.evolve(0x2000100, retype={"n": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.rewrite(v2, [{"id": 1, "n": "1!"}])
        t.insert(v2, {"id": 2, "n": "22"})
        t.rewrite(v3, [{"id": 1, "n": 2}, {"id": 2, "n": 22}])
    stream.lsn = max(stream.lsn, 0x2000100)
    report = run(catalog, config, b2)
    assert report.tables[0].schema_changes == []
    assert _ids(mirror(catalog, config, "t")) == before
    assert data(mirror(catalog, config, "t"), duck) == [{"id": 1, "n": 2}, {"id": 2, "n": 22}]


def test_a_mirror_made_by_the_batch_that_changes_a_type(catalog: Catalog, config: Config,
                                                        stream: Stream, duck: Any) -> None:
    """The batch that creates the mirror (with the table's last schema) holds rows of an
    older type: text rows before a rewrite to int, and numeric(10,2) rows before the typmod
    went (no rewrite: they are read as text)."""
    v1 = relation("t", [("id", pa.int32()), ("n", pa.string()), ("d", pa.decimal128(10, 2))],
                  key=["id"])
    v2 = v1.evolve(0x2000000, retype={"n": pa.int32()})
    v3 = v2.evolve(0x2000100, retype={"d": pa.string()})
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": "7", "d": Decimal("7.70")})
        t.rewrite(v2, [{"id": 1, "n": 7, "d": Decimal("7.70")}])
        t.insert(v2, {"id": 2, "n": 8, "d": Decimal("8.00")})
    stream.lsn = max(stream.lsn, 0x2000100)
    with b1.txn() as t:
        t.insert(v3, {"id": 3, "n": 9, "d": "9"})
    report = run(catalog, config, b1)
    assert report.tables[0].schema_changes == []
    assert data(mirror(catalog, config, "t"), duck) == [{"id": 1, "n": 7, "d": "7.70"},
                                                        {"id": 2, "n": 8, "d": "8.00"},
                                                        {"id": 3, "n": 9, "d": "9"}]


def test_a_rewrite_of_no_row_after_the_rows_went(catalog: Catalog, config: Config,
                                                 stream: Stream, duck: Any) -> None:
    """DELETE FROM t; ALTER n TYPE int USING n::int: the table is empty, so the rewrite
    writes no row and the stream no ``W``; no stored row is left to convert."""
    v1 = relation("t", [("id", pa.int32()), ("n", pa.string())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": "x"})
        t.insert(v1, {"id": 2, "n": "y"})
    run(catalog, config, b1)
    v2 = v1.evolve(0x2000000, retype={"n": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.delete(v1, {"id": 1})
        t.delete(v1, {"id": 2})
    stream.lsn = max(stream.lsn, 0x2000000)
    with b2.txn() as t:
        t.insert(v2, {"id": 3, "n": 3})
    report = run(catalog, config, b2)
    assert report.tables[0].schema_changes == [
        "replace column n by a new field n int (attnum 2)"]
    assert data(mirror(catalog, config, "t"), duck) == [{"id": 3, "n": 3}]


def test_stored_values_of_a_type_no_rewrite_replaced_are_refused(
        catalog: Catalog, config: Config, stream: Stream) -> None:
    """text -> int with rows the stream never rewrote (PostgreSQL rewrites for this change:
    the mirror does not hold what the stream says): that table stops, naming the column,
    with nothing committed."""
    v1 = relation("t", [("id", pa.int32()), ("name", pa.string())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "name": "7"})
    run(catalog, config, b1)
    snapshots = len(mirror(catalog, config, "t").snapshots())
    v2 = v1.evolve(0x2000000, retype={"name": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(v2, {"id": 2, "name": 8})
    assert re.search(r"table public\.t: column name \(attnum 2\) changed type from string to int "
                     r".*1 row\(s\) of the mirror hold the old type.*cdclake snapshot --tables "
                     r"public\.t", failure(run(catalog, config, b2), "public.t"))
    assert len(mirror(catalog, config, "t").snapshots()) == snapshots  # nothing committed


def test_narrower_type_is_held_by_the_wider_mirror_column(catalog: Catalog, config: Config,
                                                          stream: Stream, duck: Any) -> None:
    v1 = relation("t", [("id", pa.int64()), ("n", pa.int64())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": 2**40})
    run(catalog, config, b1)
    v2 = v1.evolve(0x2000000, retype={"n": pa.int16()})  # ALTER n TYPE smallint
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(v2, {"id": 2, "n": 5})
    report = run(catalog, config, b2)
    assert report.tables[0].schema_changes == []
    assert mirror(catalog, config, "t").schema().find_field("n").field_type == LongType()
    assert data(mirror(catalog, config, "t"), duck) == [{"id": 1, "n": 2**40},
                                                        {"id": 2, "n": 5}]


def test_key_change_inside_a_batch(catalog: Catalog, config: Config, stream: Stream,
                                   duck: Any) -> None:
    v1 = relation("t", [("id", pa.int32()), ("code", pa.string()), ("v", pa.int32())],
                  key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "code": "a", "v": 0})
        t.insert(v1, {"id": 2, "code": "b", "v": 0})
    run(catalog, config, b1)
    v2 = v1.evolve(0x2000000, key=["code"])  # the primary key moves to code
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(v1, {"id": 1, "code": "a", "v": 1})
    with b2.txn() as t:
        t.update(v2, {"id": 20, "code": "b", "v": 2})
        t.delete(v2, {"code": "a"})
    stream.lsn = max(stream.lsn, 0x2000000)
    report = run(catalog, config, b2)
    assert report.tables[0].strategy == "full-scan"  # 3 identities in a 2-row table
    assert data(mirror(catalog, config, "t"), duck) == [{"id": 20, "code": "b", "v": 2}]
    assert mirror(catalog, config, "t").schema().find_field("id").field_type == IntegerType()


def test_rerun_after_evolution_is_a_noop(catalog: Catalog, config: Config, stream: Stream,
                                         duck: Any) -> None:
    v1 = relation("t", [("id", pa.int32()), ("a", pa.string())], key=["id"])
    v2 = v1.evolve(0x1000100, rename={"a": "b"}, add=[("c", pa.string())])
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(v1, {"id": 1, "a": "x"})
    stream.lsn = max(stream.lsn, 0x1000100)
    with b.txn() as t:
        t.insert(v2, {"id": 2, "b": "y", "c": "z"})
    run(catalog, config, b)
    table = mirror(catalog, config, "t")
    schema_id, snaps = table.schema().schema_id, len(table.snapshots())
    again = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    table = mirror(catalog, config, "t")
    assert (table.schema().schema_id, len(table.snapshots())) == (schema_id, snaps)
    assert again.tables[0].skipped_applied == 2
    assert data(table, duck) == [{"id": 1, "b": "x", "c": None}, {"id": 2, "b": "y", "c": "z"}]


def test_the_changelog_keeps_each_row_under_the_type_it_was_logged_with(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    """A changelog keeps every row: those logged before a column was replaced (in the batch
    that replaces it too) keep their values under the old field, readable in the snapshot
    their rows made, as a dropped column's are; those after it are typed by the new field.
    One commit still."""
    v1 = relation("t", [("id", pa.int32()), ("n", pa.string())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(v1, {"id": 1, "n": "x"})
    run(catalog, config, b1, changelog=True)
    ident = changelog_identifier(config, "public", "t")
    before = catalog.load_table(ident)
    v2 = v1.evolve(0x2000000, retype={"n": pa.int32()})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(v1, {"id": 1, "n": "5"})
        t.rewrite(v2, [{"id": 1, "n": 5}])
        t.insert(v2, {"id": 2, "n": 6})
    stream.lsn = max(stream.lsn, 0x2000000)
    report = run(catalog, config, b2, changelog=True)
    assert report.changelogs[0]["appended"] == 4
    table = catalog.load_table(ident)
    assert _commits(table) == _commits(before) + 1
    assert _ids(table)["n"] != _ids(before)["n"]
    cols = ["_cdc_op", "id", "n"]
    assert sorted(duck_rows(table, cols, duck), key=repr) == sorted([
        {"_cdc_op": "I", "id": 1, "n": None}, {"_cdc_op": "U", "id": 1, "n": None},
        {"_cdc_op": "W", "id": None, "n": None}, {"_cdc_op": "R", "id": 1, "n": 5},
        {"_cdc_op": "I", "id": 2, "n": 6}], key=repr)
    first_run = table.snapshots()[-2]  # the rows logged under text, appended under it
    old = table.scan(snapshot_id=first_run.snapshot_id).to_arrow()
    assert sorted(zip(old.column("_cdc_op").to_pylist(), old.column("n").to_pylist(),
                      strict=True)) == [("I", "x"), ("U", "5")]
