"""Every mapped PostgreSQL type round-trips through a mirror, read back by DuckDB."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from cdclake.catalog.model import IDENTITY_FULL
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.typemap import iceberg_type
from tests.support.duck import rows as duck_rows
from tests.support.streamgen import relation
from tests.unit.lake.test_lake_merge import mirror, run

U1 = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
U2 = uuid.UUID("00000000-0000-0000-0000-000000000001")

# (PostgreSQL type, column, change-stream Arrow type, Iceberg type, two values)
TYPES: list[tuple[str, str, pa.DataType, Any, list[Any]]] = [
    ("boolean", "c_bool", pa.bool_(), BooleanType(), [True, False]),
    ("smallint", "c_int2", pa.int16(), IntegerType(), [-32768, 32767]),
    ("integer", "c_int4", pa.int32(), IntegerType(), [-2**31, 2**31 - 1]),
    ("bigint", "c_int8", pa.int64(), LongType(), [-2**63, 2**63 - 1]),
    ("oid", "c_oid", pa.int64(), LongType(), [0, 2**32 - 1]),
    ("real", "c_float4", pa.float32(), FloatType(), [1.5, float("inf")]),
    ("double precision", "c_float8", pa.float64(), DoubleType(), [-0.1, 1e308]),
    ("numeric(12,3)", "c_num", pa.decimal128(12, 3), DecimalType(12, 3),
     [Decimal("-123456789.123"), Decimal("0.001")]),
    ("numeric(38,0)", "c_num38", pa.decimal128(38, 0), DecimalType(38, 0),
     [Decimal("9" * 38), Decimal("-1")]),
    ("numeric", "c_numeric", pa.string(), StringType(), ["3.14159265358979323846264338327950288",
                                                         "NaN"]),
    ("text", "c_text", pa.string(), StringType(), ["héllo ☃", ""]),
    ("varchar(10)", "c_varchar", pa.string(), StringType(), ["abc", "z"]),
    ("json", "c_json", pa.string(), StringType(), ['{"a": [1, 2]}', "null"]),
    ("jsonb", "c_jsonb", pa.string(), StringType(), ['{"a": 1}', "[]"]),
    ("enum", "c_enum", pa.string(), StringType(), ["happy", "sad"]),
    ("interval", "c_interval", pa.string(), StringType(), ["1 day 02:00:00", "-00:00:01"]),
    ("inet", "c_inet", pa.string(), StringType(), ["192.168.0.1/24", "::1"]),
    ("bytea", "c_bytea", pa.binary(), BinaryType(), [b"\x00\xffbin", b""]),
    ("uuid", "c_uuid", pa.binary(16), UUIDType(), [U1.bytes, U2.bytes]),
    ("date", "c_date", pa.date32(), DateType(), [dt.date(1999, 12, 31), dt.date(1, 1, 1)]),
    ("time", "c_time", pa.time64("us"), TimeType(), [dt.time(23, 59, 59, 999999),
                                                     dt.time(0, 0)]),
    ("timestamp", "c_ts", pa.timestamp("us"), TimestampType(),
     [dt.datetime(2024, 2, 29, 12, 0, 0, 123456), dt.datetime(1900, 1, 1)]),
    ("timestamptz", "c_tstz", pa.timestamp("us", tz="UTC"), TimestamptzType(),
     [dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=dt.UTC),
      dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=dt.UTC)]),
    ("integer[]", "c_int_arr", pa.list_(pa.int32()), ListType(1, IntegerType(), False),
     [[1, None, 3], []]),
    ("text[]", "c_text_arr", pa.list_(pa.string()), ListType(1, StringType(), False),
     [["a", "b,c"], None]),
]


def _plain(value: Any) -> Any:
    """DuckDB returns uuid as text or UUID; the stream carries 16 bytes."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def _duck_values(catalog: Catalog, config: Config, name: str, duck: Any) -> list[dict]:
    got = duck_rows(mirror(catalog, config, name), None, duck)
    out = []
    for row in got:
        plain = {k: _plain(v) for k, v in row.items() if not k.startswith("_cdc_")}
        if isinstance(plain.get("c_uuid"), str):
            plain["c_uuid"] = uuid.UUID(plain["c_uuid"]).bytes
        out.append(plain)
    return sorted(out, key=lambda r: r["id"])


def _rel(replident: str = "d") -> Any:
    cols = [("id", pa.int32())] + [(c, t) for _, c, t, _, _ in TYPES]
    return relation("alltypes", cols, key=["id"], replident=replident)


def test_iceberg_types() -> None:
    for pg, col, arrow, iceberg, _ in TYPES:
        assert iceberg_type(arrow, table="t", column=col) == iceberg, pg


def test_unmapped_type_is_a_clear_error() -> None:
    with pytest.raises(LakeError, match=r"table public\.t, column c: change-stream type "
                                        r"duration\[us\] has no Iceberg mapping"):
        iceberg_type(pa.duration("us"), table="public.t", column="c")


@pytest.mark.parametrize("replident", ["d", IDENTITY_FULL])
def test_values_round_trip(catalog: Catalog, config: Config, stream: Any, duck: Any,
                           replident: str) -> None:
    rel = _rel(replident)
    rows = [{"id": i, **{c: vals[i] for _, c, _, _, vals in TYPES}} for i in (0, 1)]
    null_row = {"id": 2, **{c: None for _, c, _, _, _ in TYPES}}
    # enough other rows that the batch's region is a filter, not the whole table
    fillers = [{**null_row, "id": 100 + i} for i in range(8)]
    b1 = stream.batch("b1")
    with b1.txn() as t:
        for r in [*rows, null_row]:
            t.insert(rel, r)
        t.insert(rel, {**rows[0], "id": 3})
        for filler in fillers:
            t.insert(rel, filler)
    run(catalog, config, b1)
    schema = mirror(catalog, config, "alltypes").schema()
    for pg, col, _, iceberg, _ in TYPES:
        got = schema.find_field(col).field_type
        if isinstance(iceberg, ListType):
            assert isinstance(got, ListType) and got.element_type == iceberg.element_type, pg
        else:
            assert got == iceberg, pg
    assert _duck_values(catalog, config, "alltypes", duck) == [
        *rows, null_row, {**rows[0], "id": 3}, *fillers]

    # find rows again by their values: the key, or (FULL) every column of every type
    full = replident == IDENTITY_FULL
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {**rows[1], "c_text": "changed"}, old=rows[1] if full else None)
        t.delete(rel, null_row if full else {"id": 2})
        t.delete(rel, {**rows[0], "id": 3} if full else {"id": 3})
    report = run(catalog, config, b2)
    assert report.tables[0].not_found == 0
    assert report.tables[0].strategy == "region"
    assert _duck_values(catalog, config, "alltypes", duck) == [
        rows[0], {**rows[1], "c_text": "changed"}, *fillers]
