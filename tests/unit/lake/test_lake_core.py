"""The pure parts of the lake: replay, defaults, schema planning, regions, catalog properties,
and the batch reader's refusals."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, EqualTo, In, IsNull, Or
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType, StringType

from cdclake.catalog.model import IDENTITY_FULL
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.apply import Counts, MirrorState, Row, apply_changes, column_value
from cdclake.lake.batch import read_batch, relation_from_json
from cdclake.lake.changes import Prepared, prepare
from cdclake.lake.defaults import Unparsed, missing_defaults, parse_array, parse_text
from cdclake.lake.region import affected_region
from cdclake.lake.schema import (
    DataColumn,
    iceberg_schema,
    mirror_fields,
    plan_evolution,
    promoted,
)
from tests.support.streamgen import Rel, Stream, relation

# -- replay ---------------------------------------------------------------------------------


def _prepared(stream: Stream, build: Any) -> Prepared:
    b = stream.batch("b")
    build(b)
    b.write()
    (tc,) = list(read_batch(stream.root, "b"))
    return prepare(tc, "b")


def _replay(base: list[Row], prepared: Prepared) -> tuple[list[dict[int, Any]], Counts]:
    state = MirrorState(base, "public.t")
    counts = Counts()
    apply_changes(state, prepared.changes, counts)
    return sorted((r.values for r in state.rows()), key=repr), counts


def _rel(**kw: Any) -> Rel:
    return relation("t", [("id", pa.int32()), ("v", pa.string())], **kw)


def test_replay_last_change_wins_and_key_moves(stream: Stream) -> None:
    rel = _rel(key=["id"])

    def build(b: Any) -> None:
        with b.txn() as t:
            t.update(rel, {"id": 1, "v": "b"})
            t.update(rel, {"id": 3, "v": "moved"}, old={"id": 2})
            t.insert(rel, {"id": 4, "v": "new"})
            t.delete(rel, {"id": 9})

    base = [Row({1: 1, 2: "a"}, 5, None), Row({1: 2, 2: "two"}, 5, None)]
    rows, counts = _replay(base, _prepared(stream, build))
    assert rows == sorted([{1: 1, 2: "b"}, {1: 3, 2: "moved"}, {1: 4, 2: "new"}], key=repr)
    assert (counts.updated, counts.inserted, counts.deleted, counts.not_found) == (2, 1, 1, 1)


def test_replay_full_identity_removes_one_copy(stream: Stream) -> None:
    rel = _rel(replident=IDENTITY_FULL)

    def build(b: Any) -> None:
        with b.txn() as t:
            t.delete(rel, {"id": 1, "v": "x"})
            t.update(rel, {"id": 1, "v": None}, old={"id": 1, "v": "x"})

    base = [Row({1: 1, 2: "x"}, 5, None) for _ in range(3)]
    rows, counts = _replay(base, _prepared(stream, build))
    assert rows == sorted([{1: 1, 2: None}, {1: 1, 2: "x"}], key=repr)
    assert counts.not_found == 0


def test_replay_unchanged_toast_takes_the_replaced_rows_value(stream: Stream) -> None:
    rel = _rel(key=["id"])

    def build(b: Any) -> None:
        with b.txn() as t:
            t.update(rel, {"id": 2, "v": None}, old={"id": 1}, unchanged=["v"])

    rows, _ = _replay([Row({1: 1, 2: "big"}, 5, None)], _prepared(stream, build))
    assert rows == [{1: 2, 2: "big"}]


def test_replay_delete_without_old_key_is_malformed(stream: Stream) -> None:
    rel = _rel(key=["id"])

    def build(b: Any) -> None:
        with b.txn() as t:
            t._add(rel, "D", None, None, ())

    with pytest.raises(LakeError, match=r"public\.t: DELETE at LSN 0/.* carries no old identity"):
        _replay([], _prepared(stream, build))


def test_unsorted_stream_is_refused(stream: Stream, tmp_path: Path) -> None:
    rel = _rel(key=["id"])
    b = stream.batch("b")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "v": "a"})
    with b.txn() as t:
        t.insert(rel, {"id": 2, "v": "b"})
    directory = b.write()
    (part,) = directory.rglob("*.parquet")
    table = pq.read_table(part)
    pq.write_table(table.take([1, 0]), part)
    (tc,) = list(read_batch(stream.root, "b"))
    with pytest.raises(LakeError, match=r"batch b, table public\.t.*not in commit/WAL order"):
        prepare(tc, "b")


# -- defaults -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "arrow", "value"), [
    ("t", pa.bool_(), True),
    ("-7", pa.int16(), -7),
    ("Infinity", pa.float64(), float("inf")),
    ("12.50", pa.decimal128(6, 2), Decimal("12.50")),
    ("plain", pa.string(), "plain"),
    ("\\x00ff", pa.binary(), b"\x00\xff"),
    ("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", pa.binary(16),
     uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").bytes),
    # temporal values are the merge's storage integers (days / µs since 1970)
    ("2024-02-29", pa.date32(), (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days),
    ("13:14:15.5", pa.time64("us"), 47_655_500_000),
    ("2024-02-29 13:14:15", pa.timestamp("us"), 1_709_212_455_000_000),
    ("2024-02-29 13:14:15+02", pa.timestamp("us", tz="UTC"), 1_709_205_255_000_000),
    ('{1,NULL,3}', pa.list_(pa.int32()), [1, None, 3]),
    ('{"a,b","q\\"x",NULL,""}', pa.list_(pa.string()), ["a,b", 'q"x', None, ""]),
])
def test_parse_text(text: str, arrow: pa.DataType, value: Any) -> None:
    assert parse_text(text, arrow) == value


def test_parse_array_refuses_nested_arrays() -> None:
    assert parse_array("{}") == []
    with pytest.raises(ValueError, match="multi-dimensional"):
        parse_array("{{1,2},{3,4}}")


def test_unparsable_default_fails_only_when_needed() -> None:
    rel = relation("t", [("id", pa.int32())], key=["id"]).evolve(
        2, add=[("d", pa.date32())], defaults={"d": "not a date"})
    defaults = missing_defaults(rel.version, rel.arrow_schema())
    assert isinstance(defaults[2], Unparsed) and defaults[2].text == "not a date"


# -- schema ---------------------------------------------------------------------------------


def test_promotions() -> None:
    assert promoted(IntegerType(), LongType()) == LongType()
    assert promoted(LongType(), IntegerType()) == LongType()  # the wider column holds it
    assert promoted(FloatType(), DoubleType()) == DoubleType()
    assert promoted(DecimalType(10, 2), DecimalType(12, 2)) == DecimalType(12, 2)
    assert promoted(DecimalType(10, 2), DecimalType(12, 3)) is None
    assert promoted(StringType(), IntegerType()) is None


def test_plan_evolution_by_attnum() -> None:
    rel = relation("t", [("id", pa.int32()), ("a", pa.string()), ("b", pa.int32())])
    current = iceberg_schema(rel.version, rel.arrow_schema())
    final = [DataColumn(1, "id", LongType()), DataColumn(3, "a", IntegerType()),
             DataColumn(4, "c", StringType())]
    plan = plan_evolution(current, final, "public.t")
    assert [c.describe() for c in plan] == [
        "promote column id to long (attnum 1)", "drop column a (attnum 2)",
        "rename column b to a (attnum 3)", "add column c string (attnum 4)"]


def test_column_without_attnum_is_refused() -> None:
    schema = Schema(*iceberg_schema(_rel().version, _rel().arrow_schema()).fields[:1],
                    *[f.model_copy(update={"doc": None})
                      for f in iceberg_schema(_rel().version, _rel().arrow_schema()).fields[1:2]])
    with pytest.raises(LakeError, match="column 'v' carries no cdclake attnum"):
        mirror_fields(schema, "public.t")


def test_system_column_name_clash_is_refused() -> None:
    rel = relation("t", [("_cdc_commit_lsn", pa.int64())])
    with pytest.raises(LakeError, match="clashes with cdclake's system columns"):
        iceberg_schema(rel.version, rel.arrow_schema())


# -- region ---------------------------------------------------------------------------------


def test_region_filters(stream: Stream) -> None:
    rel = relation("t", [("id", pa.int32()), ("k", pa.string()), ("f", pa.float64())],
                   key=["id", "k"])

    def build(b: Any) -> None:
        with b.txn() as t:
            t.update(rel, {"id": 1, "k": "a", "f": 0.5})
            t.delete(rel, {"id": 2, "k": "b"})

    prepared = _prepared(stream, build)
    schema = iceberg_schema(rel.version, rel.arrow_schema())
    fields = mirror_fields(schema, "public.t")
    region = affected_region(prepared.changes, fields, table="public.t", table_rows=100)
    assert region.filter == And(In("id", [1, 2]), In("k", ["a", "b"]))
    assert region.touches({1: 2, 2: "b"}, "public.t")
    assert not region.touches({1: 1, 2: "b"}, "public.t")  # in the filter's cross product only
    assert affected_region(prepared.changes, fields, table="public.t",
                           table_rows=100, max_keys=1).filter == AlwaysTrue()
    assert affected_region(prepared.changes, fields, table="public.t",
                           table_rows=3).filter == AlwaysTrue()  # most of the table
    assert affected_region((), fields, table="public.t", table_rows=3).filter == AlwaysFalse()


def test_full_region_filters_nulls_and_skips_unfilterable(stream: Stream) -> None:
    rel = relation("t", [("n", pa.int32()), ("f", pa.float64())], replident=IDENTITY_FULL)

    def build(b: Any) -> None:
        with b.txn() as t:
            t.insert(rel, {"n": 9, "f": 9.0})
            t.delete(rel, {"n": 1, "f": 0.5})
            t.delete(rel, {"n": None, "f": 1.5})

    prepared = _prepared(stream, build)
    fields = mirror_fields(iceberg_schema(rel.version, rel.arrow_schema()), "public.t")
    region = affected_region(prepared.changes, fields, table="public.t", table_rows=100)
    assert region.filter == Or(EqualTo("n", 1), IsNull("n"))
    assert region.touches({1: None, 2: 1.5}, "public.t")
    assert not region.touches({1: 9, 2: 9.0}, "public.t")  # inserted: nothing stored to find


# -- catalog and batch ----------------------------------------------------------------------


def test_iceberg_properties(tmp_path: Path) -> None:
    local = Config(home=tmp_path).iceberg_properties()
    assert local == {"warehouse": (tmp_path / "warehouse").as_uri(),
                     "uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    s3 = Config(home=tmp_path, warehouse="s3://lake/wh", s3_endpoint_url="http://127.0.0.1:9000",
                s3_access_key_id="k", s3_secret_access_key="s").iceberg_properties()
    assert s3["s3.endpoint"] == "http://127.0.0.1:9000" and s3["s3.access-key-id"] == "k"
    assert s3["s3.secret-access-key"] == "s" and s3["s3.region"] == "us-east-1"
    rest = Config(home=tmp_path, catalog_uri="http://rest:8181",
                  catalog_properties={"type": "rest", "token": "t"}).iceberg_properties()
    assert rest["uri"] == "http://rest:8181" and rest["type"] == "rest"


def test_relation_round_trips_through_json() -> None:
    rel = _rel(key=["id"]).version
    assert relation_from_json(json.loads(json.dumps(rel.to_json()))) == rel


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(LakeError, match=r"batch nope: no manifest at .*_manifest\.json"):
        read_batch(tmp_path, "nope")


def test_row_count_mismatch_is_refused(stream: Stream) -> None:
    b = stream.batch("b")
    with b.txn() as t:
        t.insert(_rel(key=["id"]), {"id": 1, "v": "a"})
    directory = b.write()
    manifest = json.loads((directory / "_manifest.json").read_text())
    manifest["tables"][0]["versions"][0]["rows"] = 2
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LakeError, match=r"table public\.t, version v1000: manifest says 2 rows, "
                                        "files hold 1"):
        list(read_batch(stream.root, "b"))


def test_foreign_columns_are_refused(stream: Stream) -> None:
    b = stream.batch("b")
    with b.txn() as t:
        t.insert(_rel(key=["id"]), {"id": 1, "v": "a"})
    directory = b.write()
    (part,) = directory.rglob("*.parquet")
    pq.write_table(pq.read_table(part).rename_columns(
        ["id", "w", *pq.read_table(part).column_names[2:]]), part)
    with pytest.raises(LakeError, match=r"columns \['id', 'w'.* do not match"):
        list(read_batch(stream.root, "b"))


def test_read_batch_through_a_pyarrow_filesystem(stream: Stream) -> None:
    from pyarrow import fs as pafs

    b = stream.batch("b")
    with b.txn() as t:
        t.insert(_rel(key=["id"]), {"id": 1, "v": "a"})
    b.write()
    sub = pafs.SubTreeFileSystem(str(stream.root), pafs.LocalFileSystem())
    batch = read_batch("", "b", filesystem=sub)
    (tc,) = list(batch)
    assert tc.table == "public.t" and tc.rows == 1 and batch.commits == 1


def test_replay_rewrite_replaces_every_row(stream: Stream) -> None:
    """ALTER TABLE ... ADD COLUMN with a volatile default: rows no change ever carried."""
    rel = _rel(key=["id"])
    wider = rel.evolve(0x2000, add=[("r", pa.float64())])

    def build(b: Any) -> None:
        with b.txn() as t:
            t.update(rel, {"id": 1, "v": "b"})
            t.rewrite(wider, [{"id": 1, "v": "b", "r": 0.5}, {"id": 2, "v": "two", "r": 0.25}])
            t.insert(wider, {"id": 3, "v": "new", "r": 0.75})

    base = [Row({1: 1, 2: "a"}, 5, None), Row({1: 2, 2: "two"}, 5, None),
            Row({1: 9, 2: "gone since"}, 5, None)]
    rows, counts = _replay(base, _prepared(stream, build))
    assert rows == sorted([{1: 1, 2: "b", 3: 0.5}, {1: 2, 2: "two", 3: 0.25},
                           {1: 3, 2: "new", 3: 0.75}], key=repr)
    assert (counts.rewritten, counts.inserted, counts.updated) == (2, 1, 1)


def test_add_column_default_outlives_later_versions(stream: Stream) -> None:
    """A row from before ADD COLUMN ... DEFAULT keeps reading the default after a later
    version stopped naming it (VACUUM FULL materialized it and cleared attmissingval)."""
    rel = _rel(key=["id"])
    added = rel.evolve(0x2000, add=[("c", pa.string())], defaults={"c": "dflt"})
    cleared = added.evolve(0x3000, rename={"v": "w"})
    cleared = Rel(dataclasses.replace(cleared.version, columns=tuple(
        dataclasses.replace(c, has_missing=False, missing_text=None)
        for c in cleared.version.columns)), cleared.types)

    def build(b: Any) -> None:
        with b.txn() as t:
            t.insert(rel, {"id": 1, "v": "before"})
        with b.txn() as t:
            t.insert(added, {"id": 2, "v": "after", "c": "own"})
        with b.txn() as t:
            t.insert(cleared, {"id": 3, "w": "later", "c": None})

    prepared = _prepared(stream, build)
    assert prepared.versions[-1].defaults == {3: "dflt"}
    rows, _ = _replay([], prepared)
    first = next(r for r in rows if r[1] == 1)
    assert column_value(first, 3, prepared.versions[-1].defaults, "public.t") == "dflt"
