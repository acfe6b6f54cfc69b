"""The suites on edge values: a key kept as exact text (``_cdc_pg_text``) is a present key, and
dates pandas cannot hold (±infinity, BC) neither crash a check nor look like nulls."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa

from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.quality import inputs
from cdclake.quality.context import QualityContext
from cdclake.quality.runner import validate_mirrors, validate_stream
from tests.support import quality_builders as builders

TABLE = "public.edges"
I32 = 2**31 - 1
BC_DAY = -2440588
NAN = [("1", "NaN")]
KEY_TYPE = pa.struct([pa.field("k", pa.decimal128(10, 2)), pa.field("d", pa.date32()),
                      pa.field(stream.PG_TEXT, stream.PG_TEXT_TYPE)])


def relation() -> object:
    # the type facts do not matter to the suites: names, key and identity do
    return builders.relation(TABLE, columns=(("k", 23), ("d", 23)), key=("k", "d"),
                             oid=16600)


def edge_stream() -> pa.Table:
    rows = [
        # (op, k, d, old key, pg_text)
        ("I", None, I32, None, NAN),
        ("U", None, I32, None, NAN),  # key unchanged: the new row's text identifies it
        ("U", Decimal("3.00"), BC_DAY,
         {"k": None, "d": I32, stream.PG_TEXT: NAN}, None),
        ("D", None, None, {"k": None, "d": -I32, stream.PG_TEXT: NAN}, NAN),
    ]
    return changes({"k": pa.array([r[1] for r in rows], pa.decimal128(10, 2)),
                    "d": pa.array([r[2] for r in rows], pa.date32())},
                   [(r[0], r[3], r[4]) for r in rows], KEY_TYPE)


def changes(data: dict[str, pa.Array], rows: list[tuple[str, Any, Any]],
            key_type: pa.StructType) -> pa.Table:
    """A table's change stream: its ``data`` columns, and per row its op, old key and
    ``_cdc_pg_text``, one transaction."""
    n = len(rows)
    big = builders.BIG
    system = {f.name: f.type for f in stream.system_fields(key_type)}
    return pa.table({
        **data,
        stream.COMMIT_LSN: pa.array([big + 100] * n, pa.int64()),
        stream.COMMIT_TS: pa.array([builders.BASE_TS_US] * n, system[stream.COMMIT_TS]),
        stream.XID: pa.array([700] * n, pa.int64()),
        stream.LSN: pa.array([big + i for i in range(n)], pa.int64()),
        stream.SEQ: pa.array([0] * n, pa.int32()),
        stream.OP: pa.array([r[0] for r in rows]),
        stream.OLD_KEY: pa.array([r[1] for r in rows], key_type),
        stream.UNCHANGED_TOAST: pa.array([None] * n, pa.list_(pa.string())),
        stream.PG_TEXT: pa.array([r[2] for r in rows], stream.PG_TEXT_TYPE),
    })


def test_exact_text_keys_and_infinite_dates_pass_the_stream_suite(
        quality_config: Config, gx_context: QualityContext) -> None:
    report = validate_stream(quality_config, {TABLE: edge_stream()}, {TABLE: relation()},
                             context=gx_context)
    assert report.success, report.summary()


def test_exact_text_keys_pass_the_mirror_suite(quality_config: Config,
                                               gx_context: QualityContext) -> None:
    mirror = pa.table({
        "k": pa.array([None, Decimal("3.00")], pa.decimal128(10, 2)),
        "d": pa.array([I32, BC_DAY], pa.date32()),
        "_cdc_commit_lsn": pa.array([1, 2], pa.int64()),
        "_cdc_commit_ts": pa.array([0, 0], pa.timestamp("us", tz="UTC")),
        "_cdc_pg_text": pa.array([NAN, None], stream.PG_TEXT_TYPE),
    })
    report = validate_mirrors(quality_config, {TABLE: mirror}, {TABLE: relation()},
                              context=gx_context)
    assert report.success, report.summary()


def test_frame_fills_keys_from_exact_text() -> None:
    identity = inputs.identity_of(relation())  # type: ignore[arg-type]
    frame = inputs.to_frame(edge_stream(), inputs.stream_columns(identity), identity)
    assert frame["k"].tolist() == ["NaN", "NaN", Decimal("3.00"), None]  # not a DELETE's
    assert frame["d"].tolist() == [I32, I32, BC_DAY, None]  # storage days: pandas-safe
    assert [o and (o["k"], o["d"]) for o in frame[stream.OLD_KEY].tolist()] == [
        None, None, ("NaN", I32), ("NaN", -I32)]


def test_keys_cdclake_could_not_print_are_present_keys(quality_config: Config,
                                                       gx_context: QualityContext) -> None:
    """A key of a type cdclake cannot print is NULL with an entry without text (the lake
    quarantines its table): the WAL carried it, so the stream suite takes it as present —
    also in a chunk whose key column holds nothing but such values (pandas' NaN)."""
    table_name = "public.cubes"
    rel = builders.relation(table_name, columns=(("c", 25), ("n", 23)), key=("c",), oid=16700)
    unprinted = [("1", None)]
    key_type = pa.struct([pa.field("c", pa.string()),
                          pa.field(stream.PG_TEXT, stream.PG_TEXT_TYPE)])
    old = {"c": None, stream.PG_TEXT: unprinted}
    rows = [("I", None, unprinted), ("U", None, unprinted), ("U", old, unprinted),
            ("D", old, unprinted)]
    table = changes({"c": pa.nulls(len(rows), pa.string()),
                     "n": pa.array(range(len(rows)), pa.int32())}, rows, key_type)
    identity = inputs.identity_of(rel)  # type: ignore[arg-type]
    frame = inputs.to_frame(table, inputs.stream_columns(identity), identity)
    assert frame["c"].tolist()[:3] == [inputs.UNPRINTED_KEY] * 3
    report = validate_stream(quality_config, {table_name: table}, {table_name: rel},
                             context=gx_context)
    assert report.success, report.summary()
