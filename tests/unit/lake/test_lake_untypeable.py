"""Edge values in the mirror: typed where Iceberg has a type (±infinity, BC, years past 9999 as
DuckDB reads them), exact text in ``_cdc_pg_text`` where it does not — matched, replaced and
carried over like any value, never merged with a row's older texts."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from cdclake.catalog.model import IDENTITY_FULL
from cdclake.config import Config
from cdclake.decoding import stream as contract
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch, mirror_identifier
from cdclake.lake.metrics import needs_counts_only
from cdclake.lake.schema import CDC_PG_TEXT, iceberg_schema
from cdclake.lake.tables import ensure_table
from cdclake.lake.values import PgText, plain_values
from tests.support.duck import read_table
from tests.support.streamgen import Rel, Stream, Txn, relation
from tests.unit.lake.test_lake_merge import failure, mirror, run

I32 = 2**31 - 1
I64 = 2**63 - 1
BC_DAY = -2440588  # 4714-11-24 BC, as days since 1970
LAST_DAY = 2145042905  # 5874897-12-31
BC_US = -211813488000000000 + 946684800000000  # 4714-11-24 00:00:00 BC, µs since 1970
LAST_US = I64 - 1  # 294247-01-10 04:00:54.775806


def with_texts(t: Txn, texts: dict[int, str]) -> None:
    """Give the change just added its ``_cdc_pg_text`` (attnum -> exact text)."""
    t.pending[-1][1][contract.PG_TEXT] = {str(a): s for a, s in texts.items()}


def ints(column: pa.ChunkedArray) -> list[Any]:
    return plain_values(column)


def scan(table: Table, con: duckdb.DuckDBPyConnection, order: str = "id") -> pa.Table:
    data = read_table(table, con)
    return data.sort_by(order)


def texts_of(data: pa.Table) -> list[dict[str, str]]:
    return [dict(m or []) for m in data.column(CDC_PG_TEXT).to_pylist()]


# -- typed edge values ----------------------------------------------------------------------


def temporal() -> Rel:
    return relation("temporal", [("id", pa.int32()), ("d", pa.date32()),
                                 ("ts", pa.timestamp("us")),
                                 ("tz", pa.timestamp("us", tz="UTC")),
                                 ("t", pa.time64("us")), ("ds", pa.list_(pa.date32()))],
                    key=["id"])


def test_infinities_bc_and_far_years_are_typed(catalog: Catalog, config: Config,
                                                stream: Stream, duck: Any) -> None:
    rel = temporal()
    rows = [
        {"id": 1, "d": I32, "ts": I64, "tz": I64, "t": 86_399_999_999, "ds": [I32, -I32]},
        {"id": 2, "d": -I32, "ts": -I64, "tz": -I64, "t": 0, "ds": [BC_DAY, None]},
        {"id": 3, "d": BC_DAY, "ts": BC_US, "tz": BC_US, "t": 1, "ds": []},
        {"id": 4, "d": LAST_DAY, "ts": LAST_US, "tz": LAST_US, "t": 2, "ds": [LAST_DAY]},
    ]
    fillers = [{"id": 100 + i, "d": i, "ts": i, "tz": i, "t": i, "ds": None} for i in range(8)]
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for r in rows + fillers:
            t.insert(rel, r)
    run(catalog, config, b1)
    table = mirror(catalog, config, "temporal")
    data = scan(table, duck)
    for name in ("id", "d", "ts", "tz", "t", "ds"):
        assert ints(data.column(name))[:4] == [r[name] for r in rows], name
    assert texts_of(data) == [{}] * 12
    location = table.metadata_location.removeprefix("file://")
    assert duck.execute("SELECT d::varchar, ts::varchar, tz::varchar FROM iceberg_scan(?) "
                        "WHERE id <= 2 ORDER BY id", [location]).fetchall() == [
        ("infinity", "infinity", "infinity"), ("-infinity", "-infinity", "-infinity")]
    # pyiceberg cannot turn these bounds into Python values: those columns keep counts only
    props = table.properties
    for name in ("d", "ts", "tz"):
        assert props[f"write.metadata.metrics.column.{name}"] == "counts"
    assert "write.metadata.metrics.column.t" not in props

    # found again by a key of those types, through a metrics filter on storage integers
    keyed = relation("temporal_key", [("d", pa.date32()), ("ts", pa.timestamp("us")),
                                      ("v", pa.int32())], key=["d", "ts"], oid=16401)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        for i, (d, ts) in enumerate([(I32, I64), (-I32, -I64), (BC_DAY, BC_US), (5, 5)]):
            t.insert(keyed, {"d": d, "ts": ts, "v": i})
    run(catalog, config, b2)
    b3 = stream.batch("b3")
    with b3.txn() as t:
        t.update(keyed, {"d": I32, "ts": I64, "v": 10})
        t.delete(keyed, {"d": BC_DAY, "ts": BC_US})
        t.update(keyed, {"d": LAST_DAY, "ts": LAST_US, "v": 11}, old={"d": -I32, "ts": -I64})
    report = run(catalog, config, b3)
    assert report.tables[0].not_found == 0
    data = scan(mirror(catalog, config, "temporal_key"), duck, "v")
    assert list(zip(ints(data.column("d")), ints(data.column("ts")), ints(data.column("v")),
                    strict=True)) == [(5, 5, 3), (I32, I64, 10), (LAST_DAY, LAST_US, 11)]


def test_needs_counts_only() -> None:
    assert not needs_counts_only(pa.array([0, 2_932_896, None], pa.date32()))
    assert needs_counts_only(pa.array([2_932_897], pa.date32()))
    assert needs_counts_only(pa.array([-719_163], pa.date32()))
    assert needs_counts_only(pa.array([-I64], pa.timestamp("us", tz="UTC")))
    assert not needs_counts_only(pa.array([None], pa.timestamp("us")))
    assert not needs_counts_only(pa.array(["x"]))


# -- exact text -----------------------------------------------------------------------------


def edge() -> Rel:
    return relation("edge", [("id", pa.int32()), ("n", pa.decimal128(10, 2)),
                             ("a", pa.list_(pa.int32())), ("big", pa.list_(pa.string())),
                             ("v", pa.string())], key=["id"])


def test_texts_are_replaced_with_the_row_and_kept_for_unchanged_toast(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    rel = edge()
    big = "{{" + ",".join(["x" * 40] * 60) + "},{y,z}}"
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "v": "one"})
        with_texts(t, {2: "NaN", 3: "{{1,2},{3,4}}", 4: big})
        t.insert(rel, {"id": 2, "n": Decimal("1.00"), "a": [1], "v": "two"})
        for i in range(10):  # enough rows that the next batch reads a region, not everything
            t.insert(rel, {"id": 100 + i, "a": [i]})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        # big is TOASTed and unchanged: its text comes from the stored row; n and a are new
        t.update(rel, {"id": 1, "n": Decimal("2.50"), "v": "one!"}, unchanged=["big"])
        with_texts(t, {3: "[0:1]={5,6}"})
        # typed -> text, and a row whose texts all go
        t.update(rel, {"id": 2, "v": "two!"})
        with_texts(t, {2: "NaN"})
    report = run(catalog, config, b2)
    assert report.tables[0].strategy == "region"
    data = scan(mirror(catalog, config, "edge"), duck)
    got = data.select(["id", "n", "a", "big", "v"]).to_pylist()[:2]
    assert got == [{"id": 1, "n": Decimal("2.50"), "a": None, "big": None, "v": "one!"},
                   {"id": 2, "n": None, "a": None, "big": None, "v": "two!"}]
    texts = texts_of(data)
    assert texts[0] == {"3": "[0:1]={5,6}", "4": big}  # n's NaN is gone: replaced, not merged
    assert texts[1] == {"2": "NaN"}
    assert texts[2:] == [{}] * 10

    b3 = stream.batch("b3")
    with b3.txn() as t:  # everything typed again: the map goes away entirely
        t.update(rel, {"id": 1, "n": Decimal("3.00"), "a": [7], "big": ["b"], "v": "one"})
    run(catalog, config, b3)
    data = scan(mirror(catalog, config, "edge"), duck)
    assert texts_of(data)[:2] == [{}, {"2": "NaN"}]


def test_untyped_keys_are_identities(catalog: Catalog, config: Config, stream: Stream,
                                     duck: Any) -> None:
    rel = relation("keyed", [("k", pa.decimal128(10, 2)), ("v", pa.string())], key=["k"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"v": "nan"})
        with_texts(t, {1: "NaN"})
        t.insert(rel, {"k": Decimal("1.00"), "v": "one"})
        t.insert(rel, {"k": Decimal("2.00"), "v": "two"})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        # the key changes away from NaN: the old key's text is in _old_key._cdc_pg_text
        t.update(rel, {"k": Decimal("3.00"), "v": "nan"},
                 old={"k": None, contract.PG_TEXT: {"1": "NaN"}})
        t.update(rel, {"v": "two"}, old={"k": Decimal("2.00")})
        with_texts(t, {1: "NaN"})
        t.update(rel, {"v": "NaN again"})  # key unchanged: found by the new row's text
        with_texts(t, {1: "NaN"})
    with b2.txn() as t:
        t.delete(rel, {"k": Decimal("1.00")})
    report = run(catalog, config, b2)
    (r,) = report.tables
    assert (r.updated, r.deleted, r.not_found) == (3, 1, 0)
    data = scan(mirror(catalog, config, "keyed"), duck, "v")
    assert data.select(["k", "v"]).to_pylist() == [
        {"k": None, "v": "NaN again"}, {"k": Decimal("3.00"), "v": "nan"}]
    assert texts_of(data) == [{"1": "NaN"}, {}]

    b3 = stream.batch("b3")
    with b3.txn() as t:
        t.delete(rel, {"k": None, contract.PG_TEXT: {"1": "NaN"}})
    assert run(catalog, config, b3).tables[0].not_found == 0
    assert scan(mirror(catalog, config, "keyed"), duck, "v").column("v").to_pylist() == ["nan"]


def test_full_identity_matches_exact_texts(catalog: Catalog, config: Config, stream: Stream,
                                           duck: Any) -> None:
    rel = relation("fulltab", [("a", pa.list_(pa.int32())), ("t", pa.time64("us"))],
                   replident=IDENTITY_FULL)
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for text in ("{{1}}", "{{2}}", "{{1}}"):
            t.insert(rel, {"t": 5})
            with_texts(t, {1: text})
        t.insert(rel, {"a": None, "t": 5})  # a real NULL: no text
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        old = {"a": None, "t": 5, contract.PG_TEXT: {"1": "{{1}}"}}
        t.delete(rel, old)  # one of the two identical rows
        t.update(rel, {"t": 6}, old={"a": None, "t": 5, contract.PG_TEXT: {"1": "{{2}}"}})
        with_texts(t, {1: "{{2}}", 2: "24:00:00"})
    report = run(catalog, config, b2)
    assert report.tables[0].not_found == 0
    data = read_table(mirror(catalog, config, "fulltab"), duck)
    got = sorted((str(sorted(m.items())), t) for m, t in zip(
        texts_of(data), ints(data.column("t")), strict=True))
    assert got == [("[('1', '{{1}}')]", 5), ("[('1', '{{2}}'), ('2', '24:00:00')]", None),
                   ("[]", 5)]


def test_defaults_without_a_typed_value(catalog: Catalog, config: Config, stream: Stream,
                                        duck: Any) -> None:
    rel = relation("late", [("id", pa.int32())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1})
    run(catalog, config, b1)
    v2 = rel.evolve(0x2000, add=[("n", pa.decimal128(10, 2)), ("d", pa.date32()),
                                 ("a", pa.list_(pa.int32()))],
                    defaults={"n": "NaN", "d": "infinity", "a": "[0:0]={1}"})
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(v2, {"id": 2, "d": 5, "a": [1]})
        with_texts(t, {2: "NaN"})
    run(catalog, config, b2)
    data = scan(mirror(catalog, config, "late"), duck)
    assert ints(data.column("d")) == [I32, 5]
    assert data.column("n").to_pylist() == [None, None]
    assert texts_of(data) == [{"2": "NaN", "4": "[0:0]={1}"}, {"2": "NaN"}]


def test_older_mirrors_and_batches(catalog: Catalog, config: Config, stream: Stream,
                                   tmp_path: Path, duck: Any) -> None:
    rel = relation("old", [("id", pa.int32()), ("a", pa.list_(pa.int32()))], key=["id"])
    # a mirror created before _cdc_pg_text existed
    schema = iceberg_schema(rel.version, rel.arrow_schema())
    old_schema = type(schema)(*[f for f in schema.fields if f.name != CDC_PG_TEXT])
    ensure_table(catalog, mirror_identifier(config, "public", "old"), old_schema,
                 stream=config.stream, source_table="public.old", source_oid=16400,
                 kind="mirror")
    # and a batch written by a decoder from before _cdc_pg_text
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "a": [1]})
    directory = b1.write()
    (part,) = directory.rglob("*.parquet")
    pq.write_table(pq.read_table(part).drop_columns([contract.PG_TEXT]), part)
    report = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    assert report.tables[0].schema_changes == [
        "add system column _cdc_pg_text map<string, string>"]
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(rel, {"id": 2})
        with_texts(t, {2: "{{1}}"})
    run(catalog, config, b2)
    data = scan(mirror(catalog, config, "old"), duck)
    assert texts_of(data) == [{}, {"2": "{{1}}"}]


def test_changelog_carries_texts(catalog: Catalog, config: Config, stream: Stream,
                                 duck: Any) -> None:
    rel = relation("logged", [("k", pa.decimal128(10, 2)), ("d", pa.date32())], key=["k"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"d": I32})
        with_texts(t, {1: "NaN"})
        t.update(rel, {"k": Decimal("1.00"), "d": BC_DAY},
                 old={"k": None, contract.PG_TEXT: {"1": "NaN"}})
        t.delete(rel, {"k": Decimal("1.00")})
    run(catalog, config, b1, changelog=True)
    log = catalog.load_table(("cdc", "public__logged__changelog"))
    data = read_table(log, duck).sort_by("_cdc_lsn")
    assert data.column("_cdc_op").to_pylist() == ["I", "U", "D"]
    assert texts_of(data) == [{"1": "NaN"}, {}, {}]
    assert ints(data.column("d")) == [I32, BC_DAY, None]
    assert [None if k is None else json.loads(k) for k in
            data.column("_cdc_old_key").to_pylist()] == [None, {"k": "NaN"}, {"k": "1.00"}]


def test_old_key_json_prints_dates_python_cannot_hold(catalog: Catalog, config: Config,
                                                      stream: Stream, duck: Any) -> None:
    rel = relation("dated", [("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))],
                   key=["d", "ts"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for d, ts in ((I32, -I64), (BC_DAY, BC_US), (0, 1_500_000)):
            t.insert(rel, {"d": d, "ts": ts})
            t.delete(rel, {"d": d, "ts": ts})
    run(catalog, config, b1, changelog=True)
    log = read_table(catalog.load_table(("cdc", "public__dated__changelog")), duck)
    keys = [json.loads(k) for k in log.sort_by("_cdc_lsn").column("_cdc_old_key").to_pylist()
            if k is not None]
    assert keys == [{"d": "infinity", "ts": "-infinity"},
                    {"d": "4714-11-24 BC", "ts": "4714-11-24 00:00:00+00 BC"},
                    {"d": str(dt.date(1970, 1, 1)),
                     "ts": str(dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.UTC))}]


def test_texts_naming_no_column_are_refused(catalog: Catalog, config: Config,
                                            stream: Stream) -> None:
    rel = relation("bad", [("id", pa.int32())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1})
        with_texts(t, {9: "x"})
    assert re.search(r"table public\.bad.*_cdc_pg_text entry '9' names no column",
                     failure(run(catalog, config, b1), "public.bad"))


def test_pg_text_values_compare_by_text() -> None:
    assert PgText("NaN") == PgText("NaN") != "NaN"
    assert len({PgText("{{1}}"), PgText("{{1}}"), None}) == 2


def test_texts_of_a_dropped_column_stay_harmless(catalog: Catalog, config: Config,
                                                  stream: Stream, duck: Any) -> None:
    """Iceberg drops a column in its metadata only: an untouched file keeps the dropped
    column's text entries, and a later merge reading that file must not trip over them."""
    rel = relation("dropping", [("id", pa.int32()), ("x", pa.decimal128(10, 2)),
                                ("v", pa.string())], key=["id"])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "v": "nan row"})
        with_texts(t, {2: "NaN"})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(rel, {"id": 2, "x": Decimal("1.00"), "v": "other file"})
    run(catalog, config, b2)
    dropped = rel.evolve(0x2000, drop=["x"])
    b3 = stream.batch("b3")
    with b3.txn() as t:
        t.update(dropped, {"id": 2, "v": "touched"})  # rewrites only the second file
    run(catalog, config, b3)
    b4 = stream.batch("b4")
    with b4.txn() as t:
        t.update(dropped, {"id": 1, "v": "nan row, later"})
    (r,) = run(catalog, config, b4).tables
    assert (r.updated, r.not_found) == (1, 0)
    data = scan(mirror(catalog, config, "dropping"), duck)
    assert data.column("v").to_pylist() == ["nan row, later", "touched"]
    assert texts_of(data) == [{}, {}]
