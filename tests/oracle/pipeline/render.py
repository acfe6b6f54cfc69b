"""Typed change-stream and mirror values back to PostgreSQL's text, and stream rows to
``test_decoding`` lines: how the pipeline oracle compares what cdclake wrote with what
PostgreSQL says.

The change stream and the mirrors hold typed values (docs/lake.md); a slot and ``col::text``
print text. Each typed value is turned back into the datum bytes PostgreSQL stores and printed
with the codec text functions the decoding oracle already holds equal to PostgreSQL's output,
so a value that lost anything on the way into the lake prints differently and the comparison
fails. A value cdclake keeps as exact text (``_cdc_pg_text``) is compared as that text.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa

from cdclake.catalog.model import Column, RelationVersion, TypeInfo
from cdclake.decoding import stream
from cdclake.decoding.plugins.test_decoding import literal
from cdclake.lake.values import storage_type
from cdclake.tuples import arrays, datetimes, floats

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
#: days and microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01
EPOCH_DAYS = 10_957
EPOCH_US = EPOCH_DAYS * 86_400_000_000
#: the mirror/stream column holding exact text of values without a typed representation
PG_TEXT = "_cdc_pg_text"

Text = Callable[[Any], str]
#: how a line shows a value the decoder could not print (its exact-text entry has no text)
UNPRINTED = "<unprinted>"


def base_type(info: TypeInfo, types: Mapping[int, TypeInfo]) -> TypeInfo:
    while info.typtype == "d" and info.base in types:
        info = types[info.base]
    return info


def text_function(arrow_type: pa.DataType, info: TypeInfo,
                  types: Mapping[int, TypeInfo]) -> Text:
    """value (as ``to_pylist`` gives it, temporal types as integers) -> PostgreSQL text."""
    info = base_type(info, types)
    t = arrow_type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str
    if pa.types.is_boolean(t):
        return lambda v: "t" if v else "f"
    if pa.types.is_integer(t):
        return str
    if pa.types.is_float32(t):
        return floats.float4_text
    if pa.types.is_float64(t):
        return floats.float8_text
    if pa.types.is_decimal(t):
        return lambda v: format(Decimal(v), "f")
    if pa.types.is_fixed_size_binary(t) or info.output == "uuid_out":
        return lambda v: str(uuid.UUID(bytes=bytes(v))) if isinstance(v, bytes) else str(v)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return lambda v: "\\x" + bytes(v).hex()
    if pa.types.is_date(t):
        return _date_text
    if pa.types.is_time(t):
        return lambda v: datetimes.time_text(struct.pack("<q", v))
    if pa.types.is_timestamp(t):
        fn = datetimes.timestamptz_text if t.tz else datetimes.timestamp_text
        return lambda v: fn(struct.pack("<q", _pg_timestamp(v)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        elem_info = types[info.element]
        elem = text_function(t.value_type, elem_info, types)
        delim = base_type(elem_info, types).delimiter or ","
        quote = arrays.quoter(delim)
        return lambda v: arrays.format_text(
            [len(v)], [1], [None if x is None else elem(x) for x in v], delim, quote)
    raise AssertionError(f"no text rendering for Arrow type {t} ({info.name})")


def _date_text(days: int) -> str:
    if days == INT32_MAX:
        pg = INT32_MAX
    elif days in (-INT32_MAX, -(2**31)):
        pg = -(2**31)
    else:
        pg = days - EPOCH_DAYS
    return datetimes.date_text(struct.pack("<i", pg))


def _pg_timestamp(us: int) -> int:
    if us == INT64_MAX:
        return INT64_MAX
    if us in (INT64_MIN, -INT64_MAX):
        return INT64_MIN
    return us - EPOCH_US


def integer_view(table: pa.Table) -> pa.Table:
    """Temporal columns as their integer storage (a Python date cannot hold year 10000)."""
    return table.cast(pa.schema([f.with_type(storage_type(f.type)) for f in table.schema]))


# -- test_decoding lines from the change stream ----------------------------------------------


def stream_lines(rel: RelationVersion, table: pa.Table,
                 types: Mapping[int, TypeInfo]) -> list[tuple[tuple[int, int, int, int], str]]:
    """``((commit_lsn, xid, lsn, seq), line)`` for each change row of one relation version's
    part; rows of a table rewrite (no change to PostgreSQL's plugins) are left out."""
    live = rel.live_columns()
    columns = [(c, f" {c.quoted}[{types[c.type_oid].name}]:",
                text_function(table.schema.field(c.name).type, types[c.type_oid], types))
               for c in live]
    has_pg_text = PG_TEXT in table.column_names
    head = f"table {rel.qualified}:"
    out = []
    for row in integer_view(table).to_pylist():
        op = row[stream.OP]
        key = (row[stream.COMMIT_LSN], row[stream.XID], row[stream.LSN], row[stream.SEQ])
        if op == stream.OP_TRUNCATE:
            out.append((key, f"TRUNCATE {rel.qualified}"))
            continue
        if op not in (stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE):
            continue
        exact = dict(row[PG_TEXT] or []) if has_pg_text else {}
        unchanged = set(row[stream.UNCHANGED_TOAST] or ())
        new = tuple_text(columns, row, exact, unchanged, skip_nulls=False)
        old = row[stream.OLD_KEY]
        old = None if old is None or stream.NO_IDENTITY in old else old
        old_text = None if old is None else tuple_text(
            columns, old, dict(old.get(PG_TEXT) or []), set(), skip_nulls=True)
        if op == stream.OP_INSERT:
            body = " INSERT:" + new
        elif op == stream.OP_DELETE:
            body = " DELETE:" + (" (no-tuple-data)" if old_text is None else old_text)
        else:
            body = " UPDATE:" + ("" if old_text is None else f" old-key:{old_text} new-tuple:")
            body += new
        out.append((key, head + body))
    return out


def tuple_text(columns: list[tuple[Column, str, Text]], values: Mapping[str, Any],
               exact: Mapping[str, str], unchanged: set[str], *, skip_nulls: bool) -> str:
    """test_decoding's tuple: `` name[type]:literal`` for each column present in ``values``."""
    parts = []
    for c, prefix, fn in columns:
        if c.name not in values:
            continue
        v = values[c.name]
        if c.name in unchanged:
            parts.append(prefix + "unchanged-toast-datum")
        elif str(c.attnum) in exact:
            text = exact[str(c.attnum)]  # None: a value cdclake could not print
            parts.append(prefix + (UNPRINTED if text is None else literal(c.type_oid, text)))
        elif v is None:
            if not skip_nulls:
                parts.append(prefix + "null")
        else:
            parts.append(prefix + literal(c.type_oid, fn(v)))
    return "".join(parts)
