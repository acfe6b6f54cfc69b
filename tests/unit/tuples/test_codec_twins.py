"""The compiled codecs (modules compiled as themselves, and the ``.pyx`` twins) against the
codecs run by Python, value by value, for well-formed and malformed datums. Each test compares
both builds itself: it runs once (``no_twin``)."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.twins import no_twin  # noqa: F401 - compares both builds itself: runs once
from tests.unit.tuples.test_codecs import _array, numeric_disk


def assert_twins_agree(fast: Callable[..., object], reference: Callable[..., object],
                       raw: bytes, *args: object,
                       errors: type[Exception] | tuple[type[Exception], ...] = ValueError
                       ) -> None:
    """A compiled twin returns what its Python reference returns for ``raw``, or raises the
    same error (one of ``errors``; anything else fails the test)."""
    try:
        expected: object = reference(raw, *args)
    except errors as exc:
        expected = exc
    try:
        got: object = fast(raw, *args)
    except errors as exc:
        got = exc
    assert repr(got) == repr(expected), (getattr(fast, "__name__", fast), raw.hex())


@settings(max_examples=500, deadline=None)
@given(short=st.booleans(), neg=st.booleans(), dscale=st.integers(0, 63),
       weight=st.integers(-64, 63), digits=st.lists(st.integers(0, 9999), max_size=12),
       junk=st.binary(max_size=3))
def test_numeric_text_twins_agree(short: bool, neg: bool, dscale: int, weight: int,
                                  digits: list[int], junk: bytes) -> None:
    """The compiled numeric_out (``numeric.py`` compiled as itself) writes what the module run
    by Python writes, short and long headers, any weight and display scale, and raises the
    same error for malformed bytes."""
    from cdclake import native
    from cdclake.tuples import _numeric, numeric

    with native.use_python():
        python = numeric.text
    if short:
        head = 0x8000 | (0x2000 if neg else 0) | (dscale << 7) | (weight & 0x7F)
        p = struct.pack(f"<H{len(digits)}h", head, *digits)
    else:
        p = struct.pack(f"<Hh{len(digits)}h", (0x4000 if neg else 0) | dscale, weight, *digits)
    for raw in (p, p + junk, p[:len(junk)], bytes([0xFF]) * len(junk) + p):
        assert_twins_agree(_numeric.text, python, raw)


_EDGES_64 = [0, -1, 1, 2**63 - 1, -(2**63), 86_400_000_000 - 1, -86_400_000_000,
             # the first and last microsecond of 0001-01-01 and 9999-12-31, and next to them
             -63_082_281_600_000_000, -63_082_281_600_000_001, 252_455_529_599_999_999,
             252_455_529_600_000_000]


@settings(max_examples=500, deadline=None)
@given(t=st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(_EDGES_64),
                   st.integers(-63_082_281_600_000_001, 252_455_529_600_000_000)),
       junk=st.binary(max_size=9))
def test_datetime_text_twins_agree(t: int, junk: bytes) -> None:
    """The compiled date and timestamp texts (``datetimes.py`` compiled as itself) are the
    module run by Python's, inside 1..9999 AD and outside it (infinity, BC, five-digit years,
    before 4714-11-24 BC), and for malformed datums."""
    from cdclake import native
    from cdclake.tuples import _datetimes, datetimes

    names = ("timestamp_text", "timestamptz_text", "date_text")
    with native.use_python():
        pairs = [(getattr(_datetimes, n), getattr(datetimes, n)) for n in names]
    d = max(-(2**31), min(2**31 - 1, t // 86_400_000_000))
    for raw in (struct.pack("<q", t), struct.pack("<i", d), junk):
        for fast, reference in pairs:
            assert_twins_agree(fast, reference, raw)


def jsonb_disk(value: object, *, top: bool = True) -> bytes:
    """Test-only encoder: a JSON value -> jsonb container bytes (varlena header excluded), laid
    out as PostgreSQL's convertJsonb does: an offset instead of a length every 32nd entry,
    numerics and containers int-aligned in the data area; a scalar at the top is a one-element
    raw-scalar array."""
    if top and not isinstance(value, dict | list):
        return _jsonb_container([value], 1 | 0x10000000 | 0x40000000)
    if isinstance(value, dict):
        keys = list(value)
        return _jsonb_container([*keys, *(value[k] for k in keys)], len(keys) | 0x20000000)
    assert isinstance(value, list)
    return _jsonb_container(value, len(value) | 0x40000000)


def _jsonb_container(children: list[object], header: int) -> bytes:
    data = b""
    entries = []
    for i, child in enumerate(children):
        start = len(data)
        if isinstance(child, bool):
            jtype, payload = (0x30000000 if child else 0x20000000), b""
        elif child is None:
            jtype, payload = 0x40000000, b""
        elif isinstance(child, str):
            jtype, payload = 0, child.encode("utf-8", "surrogatepass")
        else:
            data += b"\0" * (-len(data) % 4)
            if isinstance(child, Decimal):
                body = numeric_disk(child)
                jtype, payload = 0x10000000, struct.pack("<I", (len(body) + 4) << 2) + body
            else:
                jtype, payload = 0x50000000, jsonb_disk(child, top=False)
        data += payload
        entries.append(jtype | (len(data) | 0x80000000 if i % 32 == 0 else len(data) - start))
    return struct.pack(f"<I{len(entries)}I", header, *entries) + data


_JSON_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]),
                     max_size=12) | st.sampled_from(['"', "\\", "\n\t\x01\x1f", "é中", ""])
_JSON = st.recursive(
    st.none() | st.booleans() | _JSON_TEXT
    | st.decimals(allow_nan=False, allow_infinity=False, places=3).map(Decimal),
    lambda inner: st.lists(inner, max_size=40) | st.dictionaries(_JSON_TEXT, inner, max_size=40),
    max_leaves=60)


@settings(max_examples=400, deadline=None)
@given(value=_JSON, cut=st.integers(0, 64), flip=st.integers(0, 4096), junk=st.binary(max_size=4))
def test_jsonb_text_twins_agree(value: object, cut: int, flip: int, junk: bytes) -> None:
    """The compiled jsonb_out (``jsonb.py`` compiled as itself) writes what the module run by
    Python writes for nested objects, arrays of more than 32 entries (offsets among the
    lengths), strings that need escaping and numerics, and raises the same error for cut,
    garbled and invalid-UTF-8 containers; and the text is the JSON of the value."""
    from cdclake import native
    from cdclake.tuples import _jsonb, jsonb

    with native.use_python():
        python = jsonb.text
    p = jsonb_disk(value)
    garbled = bytearray(p)
    if garbled:
        garbled[flip % len(garbled)] ^= 0xA5
    for raw in (p, p[:max(0, len(p) - cut)], bytes(garbled), p + junk,
                p.replace(b"\xc3\xa9", b"\xc3\x28")):
        assert_twins_agree(_jsonb.text, python, raw)
    assert json.loads(_jsonb.text(p), parse_float=Decimal, parse_int=Decimal) == value


_EDGES_32 = [0, 1, -1, 12, -12, 13, -13, 2**31 - 1, -(2**31)]


@settings(max_examples=500, deadline=None)
@given(time=st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(_EDGES_64),
                      st.integers(-86_400_000_001, 86_400_000_001)),
       day=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(_EDGES_32)),
       month=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(_EDGES_32)),
       junk=st.binary(max_size=3))
def test_interval_text_twins_agree(time: int, day: int, month: int, junk: bytes) -> None:
    """The compiled interval text is the module run by Python's for every sign mix of years,
    months, days and time (C's truncating division), +-infinity, and malformed datums."""
    from cdclake import native
    from cdclake.tuples import _datetimes, datetimes

    with native.use_python():
        python = datetimes.interval_text

    p = struct.pack("<qii", time, day, month)
    inf = struct.pack("<qii", 2**63 - 1, 2**31 - 1, 2**31 - 1)
    for raw in (p, p + junk, p[:len(junk)], inf, struct.pack("<qii", -(2**63), -(2**31),
                                                             -(2**31))):
        assert_twins_agree(_datetimes.interval_text, python, raw)


#: element oid -> (bits of an int, struct format, typlen, typalign, alignment, text function)
_ELEMENTS = {21: (16, "<h", 2, "s", 2, "int2_text"), 23: (32, "<i", 4, "i", 4, "int4_text"),
             20: (64, "<q", 8, "d", 8, "int8_text"), 25: (64, "", -1, "i", 4, "utf8_text")}


@settings(max_examples=400, deadline=None)
@given(oid=st.sampled_from(sorted(_ELEMENTS)), data=st.data(), lb=st.sampled_from([1, 1, 0, -3]),
       twod=st.booleans(), cut=st.integers(0, 9), junk=st.binary(max_size=3))
def test_array_text_twins_agree(oid: int, data: st.DataObject, lb: int, twod: bool, cut: int,
                                junk: bytes) -> None:
    """The compiled array_out and parse (``arrays.py`` compiled as itself) are the module run by
    Python's, for int2[], int4[], int8[] and text[], NULLs (a bitmap) included, two
    dimensions, lower bounds other than 1, cut-off or garbled datums; and the integer arrays'
    own writer prints what the general layout prints."""
    from cdclake import native
    from cdclake.tuples import _arrays, arrays, scalars

    with native.use_python():
        python_text, python_parse = arrays.text, arrays.parse
    bits, fmt, elen, typalign, align, text = _ELEMENTS[oid]
    values = data.draw(st.lists(st.none() | st.integers(-(2**(bits - 1)), 2**(bits - 1) - 1),
                                min_size=1, max_size=70))
    items = [None if v is None else struct.pack(fmt, v) if fmt else
             bytes([(len(str(v)) + 1) << 1 | 1]) + str(v).encode() for v in values]
    dims = [2, len(items) // 2] if twod and len(items) % 2 == 0 else [len(items)]
    p = _array(oid, dims, [lb] * len(dims), items, elen, align)
    etext, quote = getattr(scalars, text), arrays.quoter(",")
    args = (elen, typalign, oid, etext, ",", quote)
    for raw in (p, p[:max(0, len(p) - cut)], p + junk, p[:16] + junk + p[16:]):
        assert_twins_agree(_arrays.text, python_text, raw, *args)
        assert_twins_agree(_arrays.parse, python_parse, raw, elen, typalign, oid)
    dims, lbs, payloads = python_parse(p, elen, typalign, oid)
    assert _arrays.text(p, *args) == python_text(p, *args) == arrays.format_text(
        dims, lbs, [None if x is None else etext(x) for x in payloads], ",", quote)


#: doubles whose Python repr lands exactly on a rounding bound (PostgreSQL prints more digits),
#: the normal/subnormal edge, the extremes
_FLOAT_EDGES = (1e23, 8.41e21, 9.5e-5, 1e15, 1e16, 1e-4, 1e-5, 9.999999999999999e14,
                2.2250738585072014e-308, 2.225073858507201e-308, 5e-324, 1.7976931348623157e308,
                2.0**-1022, 2.0**-1021, 2.0**52, 2.0**53, 0.0, math.inf, math.nan)


@settings(max_examples=3000, deadline=None)
@given(x=st.one_of(st.floats(), st.sampled_from(_FLOAT_EDGES),
                   st.builds(lambda a, b: a / b, st.integers(-10**9, 10**9),
                             st.sampled_from([1, 3, 7, 10, 100, 1024]))),
       bits=st.integers(0, 2**64 - 1), neg=st.booleans(), junk=st.binary(max_size=9))
def test_float8_text_twins_agree(x: float, bits: int, neg: bool, junk: bytes) -> None:
    """The compiled float8out (``floats.py`` compiled as itself) writes what the module run by
    Python writes for any double, any bit pattern, the values on a rounding bound and
    subnormals, and raises the same error for a datum that is not 8 bytes; and both are Ryu's
    digits as the exact search defines them."""
    from cdclake import native
    from cdclake.tuples import _floats, floats

    with native.use_python():
        python = floats.float8_datum_text
    for raw in (struct.pack("<d", -x if neg else x), struct.pack("<Q", bits), junk):
        assert_twins_agree(_floats.float8_datum_text, python, raw)
    y = struct.unpack("<d", struct.pack("<Q", bits))[0]
    for v in (x, y):
        if math.isfinite(v) and v != 0:
            digits, exp = floats._shortest_exclusive(abs(v), 53, -1074, 17)
            text = _floats.float8_datum_text(struct.pack("<d", v))
            assert text == floats.layout(v < 0, digits.encode(), len(digits), exp, 15)
