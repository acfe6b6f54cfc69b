"""Values of ``ADD COLUMN ... DEFAULT`` for rows the WAL never rewrote.

Since PostgreSQL 11 a non-volatile default is stored once, as ``pg_attribute.attmissingval``,
and rows written before the ADD COLUMN read it without being touched: no WAL, no change in the
stream. The mirror must show the same value for those rows, so cdclake fills it from the
relation version's ``missing_text`` (the type's text output) when it adds the column. Only the
types the change stream maps are parsed; anything else is an error when (and only when) a row
actually needs the value. Values come out as the merge holds them (:mod:`cdclake.lake.values`):
temporal types as storage integers (±infinity, BC and years past 9999 included), and a default
without a typed representation (NaN in a decimal column, a 2-D array, time 24:00:00, ...) as
a :class:`~cdclake.lake.values.PgText` of its text.
"""

from __future__ import annotations

import uuid
from decimal import InvalidOperation
from typing import Any

import pyarrow as pa

from cdclake.catalog.model import RelationVersion
from cdclake.errors import LakeError
from cdclake.lake.values import PgText
from cdclake.tuples import arrays, datetimes, numeric
from cdclake.tuples.untypeable import NotTypeable


class Unparsed:
    """A default cdclake could not turn into a value; using it raises :class:`LakeError`."""

    __slots__ = ("reason", "text")

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason


def missing_defaults(version: RelationVersion, arrow_schema: pa.Schema) -> dict[int, Any]:
    """attnum -> value (or :class:`Unparsed`) for every live column with a missing value."""
    out: dict[int, Any] = {}
    for col in version.live_columns():
        if col.missing_text is None:  # kept after a rewrite cleared has_missing
            continue
        idx = arrow_schema.get_field_index(col.name)
        if idx < 0:
            continue
        try:
            out[col.attnum] = parse_text(col.missing_text, arrow_schema.field(idx).type)
        except NotTypeable:
            out[col.attnum] = PgText(col.missing_text)
        except (ValueError, InvalidOperation, LakeError) as exc:
            out[col.attnum] = Unparsed(col.missing_text, str(exc))
    return out


def parse_text(text: str, t: pa.DataType) -> Any:
    """A PostgreSQL text output (ISO DateStyle, as the dictionary captures it) as a value of
    the change-stream Arrow type ``t``; NotTypeable when that type cannot hold it."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return text
    if pa.types.is_boolean(t):
        if text in ("t", "true"):
            return True
        if text in ("f", "false"):
            return False
        raise ValueError(f"not a boolean: {text!r}")
    if pa.types.is_integer(t):
        value = int(text)
        if pa.types.is_int64(t) and value >= 1 << 63:  # an xid8 past the largest long
            raise NotTypeable(f"{value} is past the largest long")
        return value
    if pa.types.is_floating(t):
        return float(text)  # accepts NaN, Infinity, -Infinity as PostgreSQL prints them
    if pa.types.is_decimal(t):
        return numeric.decimal_from_text(text)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if not text.startswith("\\x"):
            raise ValueError(f"bytea default not in hex format: {text!r}")
        return bytes.fromhex(text[2:])
    if pa.types.is_fixed_size_binary(t):
        return uuid.UUID(text).bytes
    if pa.types.is_date32(t):
        return datetimes.date_value_from_text(text)
    if pa.types.is_time64(t):
        return datetimes.time_value_from_text(text)
    if pa.types.is_timestamp(t):  # any zone offset: the value is the instant, in µs
        return datetimes.timestamp_value_from_text(text)
    if pa.types.is_list(t):
        return [None if e is None else parse_text(e, t.value_type)
                for e in arrays.parse_literal(text)]
    raise LakeError(f"cannot parse a default of type {t}: {text!r}")


def parse_array(text: str) -> list[str | None]:
    """Elements of a one-dimensional ``array_out`` text (quotes, backslashes, NULL)."""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"not an array: {text!r}")
    body = text[1:-1]
    if not body:
        return []
    out: list[str | None] = []
    i = 0
    while True:
        if body[i] == '"':
            i += 1
            buf = []
            while body[i] != '"':
                if body[i] == "\\":
                    i += 1
                buf.append(body[i])
                i += 1
            i += 1
            out.append("".join(buf))
        else:
            j = i
            while j < len(body) and body[j] != ",":
                if body[j] in "{}":
                    raise ValueError(f"multi-dimensional arrays are not supported: {text!r}")
                j += 1
            item = body[i:j]
            out.append(None if item == "NULL" else item)
            i = j
        if i >= len(body):
            return out
        if body[i] != ",":
            raise ValueError(f"malformed array: {text!r}")
        i += 1
