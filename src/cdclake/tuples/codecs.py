"""Type codecs: a datum's payload -> PostgreSQL's text output, and -> an Arrow value.

One :class:`Codec` per column, built once from the dictionary's pg_type facts and then called
for every change; every lookup (element types, enum labels, range subtypes, domains) happens
at build time. The codec is chosen by the type's output function (``typoutput``), which is what
decides the text a server prints; domains resolve to their base type.

"payload" is what :func:`cdclake.tuples.varlena.payload` returns for varlena types (header
removed, decompressed), the attlen bytes for fixed-length types, and the bytes without the NUL
for cstrings. Text output is what ``col::text`` prints with DateStyle ISO, IntervalStyle
postgres, TimeZone UTC, extra_float_digits 1, bytea_output hex and lc_monetary C. The Arrow
mapping is documented in docs/lake.md.

A ``value`` (or ``value_from_text``) raises :class:`~cdclake.tuples.untypeable.NotTypeable`
for a valid value its Arrow type cannot hold; the guard lets it through untouched (it is not
a format error) and the row builder keeps the value's ``text`` instead.

A type whose output function cdclake does not know (a C base type from an extension, a
multirange, ...) still gets a codec, so one such column never stops the others: its Arrow
type is string and its ``value_from_text`` keeps the server's own text (an initial snapshot
reads that through COPY), but its ``value`` and ``text`` raise
:class:`~cdclake.tuples.untypeable.NoTextOutput`, for any value that is not NULL.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from fractions import Fraction

import pyarrow as pa

from cdclake.errors import TupleDecodeError
from cdclake.tuples import (
    arrays,
    datetimes,
    floats,
    geometry,
    heap,
    jsonb,
    network,
    numeric,
    ranges,
    scalars,
    textsearch,
)
from cdclake.tuples.desc import TypeInfo
from cdclake.tuples.untypeable import NoTextOutput
from cdclake.tuples.varlena import payload
from cdclake.wal.record import WalTuple

TextFn = Callable[[bytes], str]
ValueFn = Callable[[bytes], object]
FromTextFn = Callable[[str], object]

VARHDRSZ = 4
#: Arrow/Iceberg decimals hold at most 38 digits
MAX_DECIMAL_PRECISION = 38

#: what a malformed datum raises inside the pure format functions
FORMAT_ERRORS = (ValueError, struct.error, IndexError, KeyError, OverflowError)


def as_is(s: str) -> str:
    """The ``value_from_text`` of a type whose value is its text (text, json, interval, ...)."""
    return s


class Codec:
    """How one column's values print and map to Arrow. Built by :func:`codec_for`.

    ``text``, ``value`` and ``value_from_text`` are plain callables (attributes, not
    methods) so that calling them costs one function call on the hot path.
    """

    __slots__ = ("arrow_type", "column", "relation", "text", "type_name", "typisvarlena",
                 "value", "value_from_text")

    def __init__(self, type_name: str, arrow_type: pa.DataType, typisvarlena: bool,
                 text: TextFn, value: ValueFn | None = None,
                 value_from_text: FromTextFn | None = None, *, column: str = "?",
                 relation: str | None = None) -> None:
        self.type_name = type_name
        self.arrow_type = arrow_type
        self.typisvarlena = typisvarlena
        self.column = column
        self.relation = relation
        where = f"column {column!r}" + (f" of {relation}" if relation else "")
        self.text: TextFn = _guard(text, f"{type_name} value in {where}")
        self.value: ValueFn = _guard(value if value is not None else text,
                                     f"{type_name} value in {where}")
        self.value_from_text: FromTextFn = _guard(
            value_from_text if value_from_text is not None else as_is,
            f"{type_name} text in {where}")

    def __repr__(self) -> str:
        return f"Codec({self.type_name!r}, {self.arrow_type}, column={self.column!r})"


def _guard(fn: Callable[[object], object], what: str) -> Callable[[object], object]:
    """Turns a format function's low-level error into a TupleDecodeError naming the column."""
    def call(arg: object) -> object:
        try:
            return fn(arg)
        except TupleDecodeError:
            raise
        except FORMAT_ERRORS as exc:
            raise TupleDecodeError(f"cannot decode {what}: {exc}") from exc

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


# -- the per-type parts: (text, value, value_from_text, arrow type) --------------------------


class _Parts:
    """What a codec is made of before it is bound to a column (also used for elements)."""

    __slots__ = ("arrow_type", "from_text", "text", "value")

    def __init__(self, arrow_type: pa.DataType, text: TextFn, value: ValueFn | None = None,
                 from_text: FromTextFn | None = None) -> None:
        self.arrow_type = arrow_type
        self.text = text
        self.value = value if value is not None else text
        self.from_text = from_text if from_text is not None else as_is


def _string(text: TextFn) -> _Parts:
    return _Parts(pa.string(), text)


def _no_text(what: str, column: str, relation: str | None) -> _Parts:
    """A type cdclake cannot print (``what`` says which): string, the server's text kept as
    is (a snapshot's COPY prints it), any value from the WAL refused."""
    def text(p: bytes) -> str:
        raise NoTextOutput(what, column, relation)

    return _string(text)


#: record_out quotes an attribute's text that is empty or holds one of these (C's isspace)
_RECORD_SPECIAL = frozenset('"\\(), \t\n\r\v\f')


def float4_from_text(s: str) -> float:
    """The float32 nearest to the decimal ``s`` (exactly, not via a double)."""
    d = float(s)
    if math.isnan(d) or math.isinf(d) or d == 0.0:
        return struct.unpack("<f", struct.pack("<f", d))[0]
    exact = Fraction(s)
    f = struct.unpack("<f", struct.pack("<f", d))[0]
    bits = struct.unpack("<I", struct.pack("<f", f))[0]
    best = f
    for nb in (bits - 1, bits + 1):
        g = struct.unpack("<f", struct.pack("<I", nb & 0xFFFFFFFF))[0]
        if math.isinf(g) or math.isnan(g):
            continue
        dg, db = abs(Fraction(g) - exact), abs(Fraction(best) - exact)
        if dg < db or (dg == db and nb % 2 == 0):
            best = g
    return best


def _numeric_parts(typmod: int) -> _Parts:
    precision, scale = numeric_typmod(typmod)
    if precision is not None and 1 <= precision <= MAX_DECIMAL_PRECISION \
            and 0 <= scale <= precision:  # type: ignore[operator]
        return _Parts(pa.decimal128(precision, scale), numeric.text, numeric.decimal,
                      numeric.decimal_from_text)
    return _string(numeric.text)


def numeric_typmod(typmod: int) -> tuple[int | None, int]:
    """(precision, scale) of numeric(p,s), or (None, 0) when unconstrained.

    The scale is an 11-bit two's complement (negative scales exist since PostgreSQL 15).
    """
    if typmod < VARHDRSZ:
        return None, 0
    t = typmod - VARHDRSZ
    return (t >> 16) & 0xFFFF, ((t & 0x7FF) ^ 1024) - 1024


def _f4(p: bytes) -> float:
    return floats.unpack_float4(p)


def _f8(p: bytes) -> float:
    return floats.unpack_float8(p)


def _float4_text(p: bytes) -> str:
    return floats.float4_text(floats.unpack_float4(p))


def _float8_text(p: bytes) -> str:
    return floats.float8_datum_text(p)


_SIMPLE: dict[str, Callable[[], _Parts]] = {
    "boolout": lambda: _Parts(pa.bool_(), scalars.bool_text, scalars.bool_value,
                              scalars.bool_from_text),
    "int2out": lambda: _Parts(pa.int16(), scalars.int2_text, scalars.int2_value, int),
    "int4out": lambda: _Parts(pa.int32(), scalars.int4_text, scalars.int4_value, int),
    "int8out": lambda: _Parts(pa.int64(), scalars.int8_text, scalars.int8_value, int),
    "oidout": lambda: _Parts(pa.int64(), scalars.uint4_text, scalars.uint4_value, int),
    "xidout": lambda: _Parts(pa.int64(), scalars.uint4_text, scalars.uint4_value, int),
    "cidout": lambda: _Parts(pa.int64(), scalars.uint4_text, scalars.uint4_value, int),
    "xid8out": lambda: _Parts(pa.int64(), scalars.uint8_text, scalars.xid8_value,
                              scalars.xid8_from_text),
    "float4out": lambda: _Parts(pa.float32(), _float4_text, _f4, float4_from_text),
    "float8out": lambda: _Parts(pa.float64(), _float8_text, _f8, float),
    "textout": lambda: _string(scalars.utf8_text),
    # the citext extension's output function is textout's code under another name
    "citextout": lambda: _string(scalars.utf8_text),
    "varcharout": lambda: _string(scalars.utf8_text),
    "bpcharout": lambda: _string(scalars.utf8_text),
    "unknownout": lambda: _string(scalars.utf8_text),
    "cstring_out": lambda: _string(scalars.utf8_text),
    "json_out": lambda: _string(scalars.utf8_text),
    "nameout": lambda: _string(scalars.name_text),
    "charout": lambda: _string(scalars.char_text),
    "byteaout": lambda: _Parts(pa.binary(), scalars.bytea_text, scalars.bytea_value,
                               scalars.bytea_from_text),
    "uuid_out": lambda: _Parts(pa.binary(16), scalars.uuid_text, scalars.uuid_value,
                               scalars.uuid_from_text),
    "jsonb_out": lambda: _string(jsonb.text),
    "xml_out": lambda: _string(scalars.xml_text),
    "inet_out": lambda: _string(network.inet_text),
    "cidr_out": lambda: _string(network.cidr_text),
    "macaddr_out": lambda: _string(network.macaddr_text),
    "macaddr8_out": lambda: _string(network.macaddr_text),
    "cash_out": lambda: _string(scalars.money_text),
    "bit_out": lambda: _string(scalars.bits_text),
    "varbit_out": lambda: _string(scalars.bits_text),
    "pg_lsn_out": lambda: _string(scalars.pg_lsn_text),
    "tidout": lambda: _string(scalars.tid_text),
    "point_out": lambda: _string(geometry.point_text),
    "lseg_out": lambda: _string(geometry.lseg_text),
    "box_out": lambda: _string(geometry.box_text),
    "line_out": lambda: _string(geometry.line_text),
    "circle_out": lambda: _string(geometry.circle_text),
    "path_out": lambda: _string(geometry.path_text),
    "poly_out": lambda: _string(geometry.polygon_text),
    "tsvectorout": lambda: _string(textsearch.tsvector_text),
    "date_out": lambda: _Parts(pa.date32(), datetimes.date_text, datetimes.date_value,
                               datetimes.date_value_from_text),
    "time_out": lambda: _Parts(pa.time64("us"), datetimes.time_text, datetimes.time_value,
                               datetimes.time_value_from_text),
    "timetz_out": lambda: _string(datetimes.timetz_text),
    "timestamp_out": lambda: _Parts(pa.timestamp("us"), datetimes.timestamp_text,
                                    datetimes.timestamp_value,
                                    datetimes.timestamp_value_from_text),
    "timestamptz_out": lambda: _Parts(pa.timestamp("us", tz="UTC"), datetimes.timestamptz_text,
                                      datetimes.timestamp_value,
                                      datetimes.timestamp_value_from_text),
    "interval_out": lambda: _string(datetimes.interval_text),
}


class _Builder:
    """Resolves a type to its parts, following domains, arrays, enums and ranges."""

    def __init__(self, types: Mapping[int, TypeInfo], column: str, relation: str | None):
        self.types = types
        self.column = column
        self.relation = relation

    def info(self, oid: int) -> TypeInfo | str:
        """The type's facts (a domain's base type's); what is missing when they are not
        there."""
        info = self.types.get(oid)
        if info is None:
            return f"type oid {oid} (not in the dictionary)"
        seen = set()
        while info.typtype == "d":  # a domain prints and stores as its base type
            if info.oid in seen or info.base == 0:
                return f"{info.name} (domain without a base type)"
            seen.add(info.oid)
            base = self.types.get(info.base)
            if base is None:
                return f"{info.name} (its base type oid {info.base} is not in the dictionary)"
            info = base
        return info

    def no_text(self, what: str) -> _Parts:
        return _no_text(what, self.column, self.relation)

    def parts(self, oid: int, typmod: int) -> tuple[TypeInfo | None, _Parts]:
        """The type's facts and parts. A type cdclake cannot print gets :func:`_no_text`'s
        parts (the error waits for a value: its column stops nothing until one comes), and no
        facts when the dictionary lacks them."""
        info = self.info(oid)
        if isinstance(info, str):
            return None, self.no_text(info)
        output = info.output
        simple = _SIMPLE.get(output)
        if simple is not None:
            return info, simple()
        if output == "numeric_out":
            return info, _numeric_parts(typmod)
        if output == "enum_out":
            return info, self.enum(info)
        if output == "array_out" and info.element:
            return info, self.array(info, typmod)
        if output in ("int2vectorout", "oidvectorout"):
            return info, self.vector(info)
        if output == "range_out" and info.range_subtype:
            return info, self.range(info)
        if output == "record_out" and info.attributes:
            return info, self.composite(info)
        return info, self.no_text(f"{info.name} (output function {output})")

    def enum(self, info: TypeInfo) -> _Parts:
        labels = dict(info.enum_labels)
        name = info.name
        u32 = struct.Struct("<I")

        def text(p: bytes) -> str:
            oid = u32.unpack(p)[0]
            label = labels.get(oid)
            if label is None:
                raise ValueError(
                    f"enum {name}: value oid {oid} has no label in the dictionary (a label "
                    "added after the capture?)")
            return label

        return _string(text)

    def array(self, info: TypeInfo, typmod: int) -> _Parts:
        elem_info, elem = self.parts(info.element, typmod)
        if elem_info is None:  # nothing to walk its elements by
            return elem
        elem_oid = info.element
        elen, ealign = elem_info.typlen, elem_info.typalign
        delim = elem_info.delimiter or ","
        quote = arrays.quoter(delim)
        etext, evalue, efrom = elem.text, elem.value, elem.from_text
        parse = arrays.parse

        def text(p: bytes) -> str:
            return arrays.text(p, elen, ealign, elem_oid, etext, delim, quote)

        listable = arrays.check_listable

        def value(p: bytes) -> list[object]:
            # not typeable: more dimensions, a lower bound other than 1, or an element
            # without a typed value (its NotTypeable propagates: the whole array keeps text)
            dims, lbs, items = parse(p, elen, ealign, elem_oid)
            listable(dims, lbs)
            return [None if x is None else evalue(x) for x in items]

        def from_text(s: str) -> list[object]:
            return [None if x is None else efrom(x) for x in arrays.parse_literal(s, delim)]

        # what a reader of many such texts at once needs to know (snapshot.copyrows)
        from_text.element = (efrom, delim)  # type: ignore[attr-defined]
        return _Parts(pa.list_(elem.arrow_type), text, value, from_text)

    def vector(self, info: TypeInfo) -> _Parts:
        """int2vector/oidvector: one-dimensional arrays printed space-separated."""
        unsigned = info.output == "oidvectorout"
        etext = scalars.uint4_text if unsigned else scalars.int2_text
        elen = 4 if unsigned else 2
        ealign = "i" if unsigned else "s"

        def text(p: bytes) -> str:
            _, _, items = arrays.parse(p, elen, ealign)
            return " ".join(etext(x) for x in items if x is not None)

        return _string(text)

    def range(self, info: TypeInfo) -> _Parts:
        sub_info, sub = self.parts(info.range_subtype, -1)
        if sub_info is None:  # nothing to walk its bounds by
            return sub
        return _string(ranges.text_function(sub.text, sub_info.typlen, sub_info.typalign))

    def composite(self, info: TypeInfo) -> _Parts:
        """record_out: ``(a,"b c",)``, the attributes' texts (NULL as nothing), each quoted
        when empty or holding a space, a quote, a backslash, a parenthesis or a comma (quotes
        and backslashes doubled); dropped attributes left out."""
        columns = info.attributes
        texts = [None if c.dropped else self.parts(c.type_oid, c.typmod)[1].text
                 for c in columns]
        u16 = struct.Struct("<HH")

        def text(p: bytes) -> str:
            # a composite datum is a heap tuple whose header (after the varlena length)
            # holds its typmod and type oid, then t_ctid, t_infomask2, t_infomask, t_hoff
            if len(p) < 19:
                raise ValueError(f"composite datum of {len(p)} bytes is shorter than its header")
            infomask2, infomask = u16.unpack_from(p, 14)
            datums = heap.deform(WalTuple(infomask2, infomask, p[18], p[19:]), columns)
            out = []
            for col, fn, d in zip(columns, texts, datums, strict=True):
                if fn is None:
                    continue
                if d is None:
                    out.append("")
                    continue
                v = fn(payload(d, what=f"attribute {col.name!r}")  # type: ignore[arg-type]
                       if col.attlen == -1 else d)  # type: ignore[arg-type]
                if not v or any(ch in _RECORD_SPECIAL for ch in v):
                    v = '"' + v.replace("\\", "\\\\").replace('"', '""') + '"'
                out.append(v)
            return "(" + ",".join(out) + ")"

        return _string(text)


def codec_for(type_oid: int, typmod: int, types: Mapping[int, TypeInfo], *, column: str = "?",
              relation: str | None = None) -> Codec:
    """The codec of a column of type ``type_oid`` (atttypmod ``typmod``).

    A type cdclake cannot print (a C base type of an extension, multiranges, reg* types,
    ...) gets a codec whose ``text`` and ``value`` refuse every value (:func:`_no_text`).
    """
    builder = _Builder(types, column, relation)
    info, parts = builder.parts(type_oid, typmod)
    declared = types.get(type_oid) or info
    return Codec("?" if declared is None else declared.name, parts.arrow_type,
                 info is not None and info.typlen == -1, parts.text, parts.value,
                 parts.from_text, column=column, relation=relation)

