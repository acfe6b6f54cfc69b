"""ADD/DROP/RENAME COLUMN and type changes: the mirror's schema follows the source by attnum."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.types import IntegerType, LongType, StringType

from cdclake.config import Config
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from cdclake.lake.schema import field_attnum
from tests.unit.lake.streamgen import Stream, relation
from tests.unit.lake.test_lake_merge import data, failure, mirror, run


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


def test_type_change_iceberg_cannot_promote_is_refused(catalog: Catalog, config: Config,
                                                       stream: Stream) -> None:
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
    assert re.search(r"table public\.t: column name \(attnum 2\) changed type from string to int",
                     failure(run(catalog, config, b2), "public.t"))
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
