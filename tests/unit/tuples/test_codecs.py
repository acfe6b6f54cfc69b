"""Codecs without a server: dispatch (domains, enums, arrays, ranges, composites, types no
codec prints), Arrow mappings, errors that name the column, and value_from_text inverting
text()."""

from __future__ import annotations

import math
import struct
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.catalog.model import Column, TypeInfo
from cdclake.errors import TupleDecodeError, UnsupportedTypeError
from cdclake.tuples.codecs import codec_for, numeric_typmod
from cdclake.tuples.untypeable import NoTextOutput, NotTypeable
from tests.unit.tuples.builtin_types import BUILTIN


def typmod(p: int, s: int) -> int:
    return ((p << 16) | (s & 0x7FF)) + 4


def numeric_disk(d: Decimal) -> bytes:
    """Test-only encoder: a finite Decimal -> NumericLong on-disk bytes (header excluded)."""
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    dscale = max(0, -exp)
    n = int("".join(map(str, digits)) or "0")
    # align the decimal exponent to a multiple of 4 (base 10000)
    shift = exp % 4
    n *= 10**shift
    e4 = (exp - shift) // 4
    groups = []
    while n:
        n, r = divmod(n, 10000)
        groups.append(r)
    groups.reverse()
    while groups and groups[-1] == 0:
        groups.pop()
        e4 += 1
    weight = e4 + len(groups) - 1 if groups else 0
    head = (0x4000 if sign and groups else 0) | dscale
    return struct.pack(f"<Hh{len(groups)}h", head, weight, *groups)


#: pg_type facts of types no codec prints: an extension's C base type, a multirange
CUBE = TypeInfo(oid=90030, name="cube", output="cube_out", typlen=-1, typbyval=False,
                typalign="d", typtype="b", typcategory="U", namespace="public")
MULTIRANGE = TypeInfo(oid=4451, name="int4multirange", output="multirange_out", typlen=-1,
                      typbyval=False, typalign="i", typtype="m", typcategory="R",
                      range_subtype=3904)
CUBES = TypeInfo(oid=90031, name="cube[]", output="array_out", typlen=-1, typbyval=False,
                 typalign="d", typtype="b", typcategory="A", element=90030)
TYPES = {**BUILTIN, **{t.oid: t for t in (CUBE, MULTIRANGE, CUBES)}}


@pytest.mark.parametrize("oid", [90030, 4451, 90031, 90020, 2249, 4242])
def test_a_type_cdclake_cannot_print_gets_a_codec_that_refuses_its_values(oid: int) -> None:
    """Such a column stops nothing until a value of it comes: the codec is a string one whose
    ``value`` raises NoTextOutput (the row builder marks the value, the lake quarantines the
    table), whose ``text`` stops a plugin that must print it with one line naming type, column
    and table, and whose ``value_from_text`` keeps the server's own text (a snapshot's COPY)."""
    codec = codec_for(oid, -1, TYPES, column="p", relation="public.t")
    assert codec.arrow_type == (pa.list_(pa.string()) if oid == 90031 else pa.string())
    # an array of one element (a 1-byte varlena), or any bytes
    datum = (struct.pack("<iiIii", 1, 0, 90030, 1, 1) + b"\x0babcd" if oid == 90031
             else b"\x00" * 16)
    with pytest.raises(NoTextOutput) as caught:
        codec.value(datum)
    assert isinstance(caught.value, NotTypeable)  # what the row builder catches
    with pytest.raises(UnsupportedTypeError, match=r"unsupported type '.*' in column 'p' of "
                                                   r"public\.t: cdclake cannot print"):
        codec.text(datum)
    if oid != 90031:
        assert codec.value_from_text("(1, 2)") == "(1, 2)"
    else:
        assert codec.value_from_text('{"(1, 2)",(3)}') == ["(1, 2)", "(3)"]


def test_what_names_the_type_that_cannot_be_printed() -> None:
    for oid, what in ((90030, r"cube \(output function cube_out\)"),
                      (4242, r"type oid 4242 \(not in the dictionary\)"),
                      (2249, r"record \(output function record_out\)")):
        with pytest.raises(UnsupportedTypeError, match=what):
            codec_for(oid, -1, TYPES, column="q").text(b"\x00")


def _composite(natts: int, nulls: set[int], data: bytes) -> bytes:
    """A composite datum's payload (its varlena header removed): typmod, type oid, t_ctid,
    t_infomask2 (natts), t_infomask (HEAP_HASNULL), t_hoff, the null bitmap, then ``data``
    at the MAXALIGNed t_hoff."""
    bits = bytes([sum(1 << i for i in range(natts) if i not in nulls)]) if nulls else b""
    hoff = (23 + len(bits) + 7) & ~7
    head = struct.pack("<iI6sHHB", -1, 90040, b"\x00" * 6, natts, 1 if nulls else 0, hoff)
    return head + bits + b"\x00" * (hoff - 23 - len(bits)) + data


def _short_text(s: str) -> bytes:
    raw = s.encode()
    return bytes([(len(raw) + 1) << 1 | 1]) + raw


ATTRS = (Column(1, "n", "n", 23, -1, 4, "i", True),
         Column(2, "gone", "gone", 0, -1, 4, "i", True, dropped=True),
         Column(3, "t", "t", 25, -1, -1, "i", False))
PAIR = TypeInfo(oid=90040, name="pair", output="record_out", typlen=-1, typbyval=False,
                typalign="d", typtype="c", typcategory="C", attributes=ATTRS)


@pytest.mark.parametrize(("t", "printed"), [
    ("plain", "(7,plain)"), ("", '(7,"")'), ("a b", '(7,"a b")'), ('say "hi"', '(7,"say ""hi""")'),
    ("back\\slash", '(7,"back\\\\slash")'), ("(x)", '(7,"(x)")'), ("a,b", '(7,"a,b")'),
    ("tab\there", '(7,"tab\there")'), ("é", "(7,é)"), (None, "(7,)")])
def test_composite_values_print_as_record_out(t: str | None, printed: str) -> None:
    """record_out: attributes in order, a dropped one left out, NULL as nothing, a text
    quoted when empty or holding a space, quote, backslash, parenthesis or comma (quotes
    and backslashes doubled). The server agrees: tests/oracle/tuples."""
    codec = codec_for(90040, -1, {**BUILTIN, 90040: PAIR}, column="p")
    assert codec.arrow_type == pa.string()
    data = struct.pack("<ii", 7, 99) + (b"" if t is None else _short_text(t))
    datum = _composite(3, {2} if t is None else set(), data)
    assert codec.text(datum) == codec.value(datum) == printed
    assert codec.value_from_text(printed) == printed  # a snapshot's COPY prints the same


def test_a_composite_value_older_than_its_attribute_prints_it_as_null() -> None:
    codec = codec_for(90040, -1, {**BUILTIN, 90040: PAIR}, column="p")
    assert codec.text(_composite(1, set(), struct.pack("<i", -3))) == "(-3,)"


XID8 = TypeInfo(oid=5069, name="xid8", output="xid8out", typlen=8, typbyval=True, typalign="d",
                typtype="b", typcategory="U")


def test_xid8_is_a_long_and_its_values_past_one_are_kept_as_text() -> None:
    codec = codec_for(5069, -1, {5069: XID8})
    assert codec.arrow_type == pa.int64()  # Iceberg has no unsigned type
    for v in (0, 750, 2**63 - 1):
        assert codec.value(struct.pack("<Q", v)) == codec.value_from_text(str(v)) == v
    for v in (2**63, 2**64 - 1):
        with pytest.raises(NotTypeable):
            codec.value(struct.pack("<Q", v))
        with pytest.raises(NotTypeable):
            codec.value_from_text(str(v))
        assert codec.text(struct.pack("<Q", v)) == str(v)


def test_citext_prints_as_text() -> None:
    citext = TypeInfo(oid=90050, name="citext", output="citextout", typlen=-1, typbyval=False,
                      typalign="i", typtype="b", typcategory="S", namespace="public")
    codec = codec_for(90050, -1, {90050: citext})
    assert codec.arrow_type == pa.string() and codec.typisvarlena
    assert codec.text(b"AbC \xc3\xa9") == codec.value(b"AbC \xc3\xa9") == "AbC é"


def test_arrow_mappings() -> None:
    expect = {16: pa.bool_(), 21: pa.int16(), 23: pa.int32(), 20: pa.int64(), 26: pa.int64(),
              700: pa.float32(), 701: pa.float64(), 25: pa.string(), 17: pa.binary(),
              2950: pa.binary(16), 1082: pa.date32(), 1083: pa.time64("us"),
              1114: pa.timestamp("us"), 1184: pa.timestamp("us", tz="UTC"),
              1186: pa.string(), 3802: pa.string(), 1700: pa.string(),
              1007: pa.list_(pa.int32()), 1009: pa.list_(pa.string()), 3904: pa.string(),
              90001: pa.string(), 90010: pa.int32()}
    for oid, arrow in expect.items():
        assert codec_for(oid, -1, BUILTIN).arrow_type == arrow, oid
    assert codec_for(1700, typmod(10, 2), BUILTIN).arrow_type == pa.decimal128(10, 2)
    assert codec_for(1700, typmod(38, 0), BUILTIN).arrow_type == pa.decimal128(38, 0)
    for p, s in ((39, 2), (3, 5), (5, -2)):
        assert codec_for(1700, typmod(p, s), BUILTIN).arrow_type == pa.string(), (p, s)
    assert numeric_typmod(typmod(5, -2)) == (5, -2)
    assert codec_for(1231, typmod(6, 2), BUILTIN).arrow_type == pa.list_(pa.decimal128(6, 2))
    assert codec_for(25, -1, BUILTIN).typisvarlena
    assert not codec_for(1186, -1, BUILTIN).typisvarlena


def test_enum_and_domain() -> None:
    mood = codec_for(90001, -1, BUILTIN, column="m", relation="s.t")
    assert mood.text(struct.pack("<I", 90003)) == "happy"
    with pytest.raises(TupleDecodeError, match=r"column 'm' of s.t: enum mood: value oid 5 has "
                                               "no label"):
        mood.text(struct.pack("<I", 5))
    pos = codec_for(90010, -1, BUILTIN)
    assert pos.text(struct.pack("<i", 7)) == "7" and pos.value(struct.pack("<i", 7)) == 7
    assert pos.type_name == "posint"


def test_errors_name_column_and_relation() -> None:
    text = codec_for(25, -1, BUILTIN, column="body", relation="public.docs")
    with pytest.raises(TupleDecodeError, match=r"cannot decode text value in column 'body' of "
                                               "public.docs"):
        text.text(b"\xff\xfe")
    num = codec_for(1700, -1, BUILTIN, column="n")
    with pytest.raises(TupleDecodeError, match=r"column 'n'.*odd number of bytes"):
        num.text(b"\x00\x00\x00\x00\x01")
    ts = codec_for(1114, -1, BUILTIN, column="t")
    with pytest.raises(NotTypeable, match=r"294276-12-31 23:59:59.999999 is beyond the range"):
        ts.value(struct.pack("<q", 9223371331200000000 - 1))  # valid, but no Arrow value


def _array(elem_oid: int, dims: list[int], lbs: list[int], items: list[bytes | None],
           elem_len: int, align: int) -> bytes:
    """Test-only array payload (after the varlena header)."""
    ndim = len(dims)
    nulls = any(x is None for x in items)
    head = struct.pack(f"<iiI{ndim}i{ndim}i", ndim, 0, elem_oid, *dims, *lbs)
    bitmap = b""
    if nulls:
        bits = bytearray((len(items) + 7) // 8)
        for i, x in enumerate(items):
            if x is not None:
                bits[i >> 3] |= 1 << (i & 7)
        bitmap = bytes(bits)
    data_off = (4 + len(head) + len(bitmap) + 7) & ~7
    if nulls:
        head = struct.pack("<ii", ndim, data_off) + head[8:]
    out = bytearray(head + bitmap)
    out += b"\x00" * (data_off - 4 - len(out))
    for x in items:
        if x is None:
            continue
        while (len(out) + 4) % align:
            out.append(0)
        out += x
    return bytes(out)


def test_arrays() -> None:
    ints = codec_for(1007, -1, BUILTIN, column="a")
    two_d = _array(23, [2, 2], [1, 1], [struct.pack("<i", i) for i in (1, 2, 3, 4)], 4, 4)
    assert ints.text(two_d) == "{{1,2},{3,4}}"
    with pytest.raises(NotTypeable, match=r"2-dimensional array has no Arrow list"):
        ints.value(two_d)
    with_null = _array(23, [3], [0], [struct.pack("<i", 5), None, struct.pack("<i", -6)], 4, 4)
    assert ints.text(with_null) == "[0:2]={5,NULL,-6}"
    with pytest.raises(NotTypeable, match=r"lower bound 0"):
        ints.value(with_null)
    one = _array(23, [3], [1], [struct.pack("<i", 5), None, struct.pack("<i", -6)], 4, 4)
    assert ints.value(one) == [5, None, -6]
    texts = codec_for(1009, -1, BUILTIN)
    words = [b"", b"NULL", b"a b", b'q"u', b"b\\s", b"plain", b"{x}"]
    arr = _array(25, [len(words)], [1],
                 [struct.pack("<I", (len(w) + 4) << 2) + w for w in words], -1, 4)
    out = texts.text(arr)
    assert out == '{"","NULL","a b","q\\"u","b\\\\s",plain,"{x}"}'
    assert texts.value_from_text(out) == [w.decode() for w in words]
    assert texts.value_from_text("{NULL,null,\"NULL\"}") == [None, None, "NULL"]
    with pytest.raises(TupleDecodeError, match=r"array element type oid 25 differs"):
        ints.text(arr)


# -- value_from_text(text(p)) == value(p) ----------------------------------------------------

PAYLOADS = {
    16: st.sampled_from([b"\x00", b"\x01"]),
    21: st.integers(-(2**15), 2**15 - 1).map(lambda v: struct.pack("<h", v)),
    23: st.integers(-(2**31), 2**31 - 1).map(lambda v: struct.pack("<i", v)),
    20: st.integers(-(2**63), 2**63 - 1).map(lambda v: struct.pack("<q", v)),
    26: st.integers(0, 2**32 - 1).map(lambda v: struct.pack("<I", v)),
    700: st.integers(0, 2**32 - 1).map(lambda v: struct.pack("<I", v)),
    701: st.integers(0, 2**64 - 1).map(lambda v: struct.pack("<Q", v)),
    17: st.binary(max_size=20),
    2950: st.binary(min_size=16, max_size=16),
    1082: st.integers(-2451545, 2145031948).map(lambda v: struct.pack("<i", v)),
    1083: st.integers(0, 86400000000).map(lambda v: struct.pack("<q", v)),
    1114: st.integers(-211813488000000000, 9223371331200000000 - 1).map(
        lambda v: struct.pack("<q", v)),
    1184: st.integers(-211813488000000000, 9223371331200000000 - 1).map(
        lambda v: struct.pack("<q", v)),
}


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and (math.isnan(a) or math.isnan(b)):
        return math.isnan(a) and math.isnan(b)
    return a == b and type(a) is type(b)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_value_from_text_inverts_text(data: st.DataObject) -> None:
    for oid, strategy in PAYLOADS.items():
        codec = codec_for(oid, -1, BUILTIN)
        p = data.draw(strategy)
        try:
            expected = codec.value(p)
        except NotTypeable:  # timestamps past 2^63 µs from 1970, time 24:00:00
            with pytest.raises(NotTypeable):
                codec.value_from_text(codec.text(p))
            continue
        got = codec.value_from_text(codec.text(p))
        assert _same(got, expected), (oid, p, codec.text(p), got, expected)


@settings(max_examples=200, deadline=None)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=2,
                   min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99")))
def test_numeric_decimal_and_text(d: Decimal) -> None:
    codec = codec_for(1700, typmod(10, 2), BUILTIN)
    p = numeric_disk(d)
    assert codec.text(p) == f"{d:.2f}"
    assert codec.value(p) == d
    assert codec.value_from_text(codec.text(p)) == d
    pa.array([codec.value(p)], type=codec.arrow_type)


def test_numeric_specials_are_not_typeable() -> None:
    codec = codec_for(1700, typmod(10, 2), BUILTIN)
    for head, text in ((0xC000, "NaN"), (0xD000, "Infinity"), (0xF000, "-Infinity")):
        p = struct.pack("<H", head)
        assert codec.text(p) == text
        with pytest.raises(NotTypeable):
            codec.value(p)
        with pytest.raises(NotTypeable):
            codec.value_from_text(text)
