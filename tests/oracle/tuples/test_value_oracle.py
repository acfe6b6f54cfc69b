"""Oracle: codec.value of tuples read from pages == the server's value in Arrow storage form.

For the non-string mappings: psycopg's Python values (ints, floats, Decimals, bytes, UUIDs,
lists), and for date/time types the server's own epoch arithmetic (psycopg cannot hold
infinities, BC dates or years past 9999). Every column's values must also build a pyarrow
array of the codec's arrow_type. Values the Arrow type cannot hold (arrays with more dimensions
or another lower bound, NaN in a decimal, time 24:00:00, timestamps past int64 µs from 1970,
or an xid8 past the largest long) must raise NotTypeable — and only those.
"""

from __future__ import annotations

import math
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from psycopg import sql

from cdclake.catalog.model import TypeInfo
from cdclake.local.postgres import LocalPostgres
from cdclake.tuples.untypeable import NotTypeable
from tests.oracle.tuples.harness import decode_table
from tests.oracle.tuples.test_text_oracle import _create_filled
from tests.oracle.tuples.types_catalog import SETUP, TYPES

pytestmark = pytest.mark.oracle

INT64_MAX = 2**63 - 1
USECS_PER_DAY = 86_400_000_000
#: psycopg's value for a value without a typed representation (NaN in a decimal)
UNTYPEABLE = object()

#: date/time columns: SQL computing the Arrow storage value as numeric text
EPOCH_SQL = {
    "date": "CASE WHEN {0} = 'infinity' THEN 2147483647 WHEN {0} = '-infinity' "
            "THEN -2147483647 ELSE {0} - date '1970-01-01' END",
    "time": "extract(epoch from {0}) * 1000000",
    "timestamp": "CASE WHEN {0} = 'infinity' THEN 9223372036854775807 WHEN {0} = '-infinity' "
                 "THEN -9223372036854775807 ELSE extract(epoch from {0}) * 1000000 END",
    "timestamptz": "CASE WHEN {0} = 'infinity' THEN 9223372036854775807 WHEN {0} = "
                   "'-infinity' THEN -9223372036854775807 ELSE extract(epoch from {0}) * "
                   "1000000 END",
}


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _arrow_form(v: object, arrow_type: pa.DataType) -> object:
    """psycopg's value -> the codec's value convention for ``arrow_type``."""
    if v is None:
        return None
    if pa.types.is_list(arrow_type):
        assert isinstance(v, list)
        return [_arrow_form(x, arrow_type.value_type) for x in v]
    if isinstance(v, str) and pa.types.is_integer(arrow_type):
        return int(v)  # psycopg has no loader for xid, cid, xid8
    if pa.types.is_float32(arrow_type):
        return _f32(float(v))  # type: ignore[arg-type]
    if pa.types.is_decimal(arrow_type):
        assert isinstance(v, Decimal)
        return v if v.is_finite() else UNTYPEABLE
    if pa.types.is_fixed_size_binary(arrow_type):
        return v.bytes if isinstance(v, uuid.UUID) else v
    if pa.types.is_binary(arrow_type):
        return bytes(v)  # type: ignore[arg-type]
    return v


def _untypeable(v: object, t: pa.DataType) -> bool:
    """Does the server's value lack an Arrow value of type ``t``?"""
    if v is UNTYPEABLE:
        return True
    if isinstance(v, list):
        return any(_untypeable(x, t.value_type) for x in v)
    if not isinstance(v, int):
        return False
    if pa.types.is_int64(t):
        return v > INT64_MAX  # an xid8 past the largest long
    if pa.types.is_time64(t):
        return v >= USECS_PER_DAY  # 24:00:00
    if pa.types.is_timestamp(t):
        return v > INT64_MAX  # past int64 µs from 1970 (INT64_MAX itself is infinity)
    return False


def _plain_type(types: dict[int, TypeInfo], oid: int) -> TypeInfo:
    """The type psycopg knows for a column: domains (and arrays of domains) resolved."""
    info = types[oid]
    while info.typtype == "d":
        info = types[info.base]
    if info.output == "array_out" and types[info.element].typtype == "d":
        elem = _plain_type(types, info.element)
        info = next(t for t in types.values() if t.element == elem.oid
                    and t.output == "array_out")
    return info


def _server_values(conn: Any, ident: sql.Identifier, typename: str, plain: str,
                   arrow_type: pa.DataType) -> list[tuple[str, object, bool]]:
    """(ctid, expected Arrow-form value, not_listable) per row, as the server computes it;
    not_listable: an array with more than one dimension or a lower bound other than 1."""
    base = typename.split("(")[0]
    is_list = pa.types.is_list(arrow_type)
    elem = base.removesuffix("[]").split("(")[0]
    ndims = sql.SQL("(coalesce(array_ndims({0}), 0) > 1 OR coalesce(array_lower({0}, 1), 1) "
                    "<> 1)").format(ident) if is_list else sql.SQL("false")
    if is_list and pa.types.is_string(arrow_type.value_type):
        # elements by subscript (unnest spreads a composite over columns); num_nulls: whether
        # an element is NULL (IS NULL is true of a composite of NULLs too)
        expr = sql.SQL("CASE WHEN {0} IS NOT NULL THEN coalesce((SELECT array_agg(CASE WHEN "
                       "num_nulls(({0})[i]) = 1 THEN NULL ELSE format('%s', ({0})[i]) END "
                       "ORDER BY i) FROM generate_subscripts({0}, 1) i), '{{}}') END")
        rows = conn.execute(sql.SQL("SELECT ctid::text, {}, {} FROM vals").format(
            expr.format(ident), ndims)).fetchall()
        return [(ctid, v, multi) for ctid, v, multi in rows]
    if is_list and elem in EPOCH_SQL:
        expr = sql.SQL("CASE WHEN {1} IS NOT NULL THEN coalesce((SELECT array_agg(({0})::text "
                       "ORDER BY n) FROM unnest({1}) WITH ORDINALITY AS u(e, n)), '{{}}') END"
                       ).format(sql.SQL(EPOCH_SQL[elem].replace("{0}", "e")), ident)
        rows = conn.execute(sql.SQL("SELECT ctid::text, {}, {} FROM vals").format(
            expr, ndims)).fetchall()
        return [(ctid, None if v is None else [None if x is None else int(Decimal(x))
                                               for x in v], multi) for ctid, v, multi in rows]
    if base in EPOCH_SQL:
        expr = sql.SQL(EPOCH_SQL[base].replace("{0}", "{ident}")).format(ident=ident)
        rows = conn.execute(sql.SQL("SELECT ctid::text, ({})::text FROM vals").format(expr)
                            ).fetchall()
        return [(ctid, None if v is None else int(Decimal(v)), False) for ctid, v in rows]
    rows = conn.execute(sql.SQL("SELECT ctid::text, {}::{}, {} FROM vals").format(
        ident, sql.SQL(plain), ndims)).fetchall()
    return [(ctid, _arrow_form(v, arrow_type) if not multi else None, multi)
            for ctid, v, multi in rows]


def test_values_match_psycopg_and_build_arrow_arrays(pg: LocalPostgres, conn: Any) -> None:
    for stmt in SETUP:
        conn.execute(stmt)
    _create_filled(conn, "vals", TYPES)
    decoded = decode_table(conn, "vals")
    assert decoded.mismatches == []
    live = [c for c in decoded.columns if not c.dropped]
    by_type = {c.attnum: t for c, (t, _) in zip(live, TYPES, strict=True)}
    checked = {"values": 0, "columns": 0, "untypeable": 0}
    for c in live:
        codec = decoded.codecs[c.attnum]
        if pa.types.is_string(codec.arrow_type):
            continue  # value() is the text output, compared by the text oracle
        column_values = []
        plain = _plain_type(decoded.types, c.type_oid).name
        for ctid, expected, multidim in _server_values(conn, sql.Identifier(c.name),
                                                       by_type[c.attnum], plain,
                                                       codec.arrow_type):
            blk, off = (int(x) for x in ctid.strip("()").split(","))
            _, p = decoded.rows[(blk, off)][c.attnum]
            if p is None:
                assert expected is None
                column_values.append(None)
                continue
            if multidim or _untypeable(expected, codec.arrow_type):
                with pytest.raises(NotTypeable):
                    codec.value(p)
                checked["untypeable"] += 1
                continue
            got = codec.value(p)
            assert _same(got, expected), (c.name, by_type[c.attnum], ctid, got, expected)
            checked["values"] += 1
            column_values.append(got)
        pa.array(column_values, type=codec.arrow_type)
        checked["columns"] += 1
    assert checked["values"] > 100 and checked["columns"] > 30 and checked["untypeable"] >= 3, \
        checked
