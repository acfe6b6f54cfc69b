"""heap.deform on hand-built tuples: layouts, NULLs, missing values, dropped columns, and
truncated or malformed bytes raising TupleDecodeError that names the column."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.catalog.model import Column
from cdclake.errors import TupleDecodeError
from cdclake.tuples import heap
from cdclake.tuples.desc import MissingValue
from cdclake.wal.record import WalTuple

ALIGN = {"c": 1, "s": 2, "i": 4, "d": 8}

#: (attlen, attalign) of column kinds used below
KINDS = {"bool": (1, "c"), "int2": (2, "s"), "int4": (4, "i"), "int8": (8, "d"),
         "text": (-1, "i"), "dtext": (-1, "d"), "cstring": (-2, "c"), "uuid": (16, "c"),
         "interval": (16, "d")}


def col(attnum: int, kind: str, **kw: object) -> Column:
    attlen, align = KINDS[kind]
    return Column(attnum=attnum, name=f"c{attnum}", quoted=f"c{attnum}", type_oid=0,
                  typmod=-1, attlen=attlen, attalign=align, attbyval=attlen in (1, 2, 4, 8),
                  **kw)  # type: ignore[arg-type]


def varlena(payload: bytes, short: bool) -> bytes:
    if short:
        return bytes([((len(payload) + 1) << 1) | 1]) + payload
    return struct.pack("<I", (len(payload) + 4) << 2) + payload


def build(columns: list[Column], datums: list[bytes | None]) -> WalTuple:
    """Lay a tuple out as heap_fill_tuple does; offsets relative to the tuple start."""
    natts = len(datums)
    has_nulls = any(d is None for d in datums)
    hoff = 23 + ((natts + 7) // 8 if has_nulls else 0)
    hoff = (hoff + 7) & ~7
    bits = bytearray((natts + 7) // 8 if has_nulls else 0)
    body = bytearray(b"\x00" * hoff)
    for i, (c, d) in enumerate(zip(columns, datums, strict=False)):
        if d is None:
            continue
        if has_nulls:
            bits[i >> 3] |= 1 << (i & 7)
        short = c.attlen == -1 and d[0] & 1
        if not short:
            a = ALIGN[c.attalign]
            while len(body) % a:
                body.append(0)
        body += d
    data = bytes(bits) + bytes(body[23 + len(bits):])
    return WalTuple(infomask2=natts, infomask=0x0001 if has_nulls else 0, t_hoff=hoff,
                    data=data)


def test_fixed_varlena_cstring_and_nulls() -> None:
    cols = [col(1, "bool"), col(2, "int8"), col(3, "text"), col(4, "int2"), col(5, "dtext"),
            col(6, "cstring"), col(7, "int4"), col(8, "uuid")]
    datums: list[bytes | None] = [
        b"\x01", struct.pack("<q", -5), varlena(b"short", True), None,
        varlena(b"L" * 200, False), b"cstr\x00", struct.pack("<i", 7), bytes(range(16))]
    got = heap.deform(build(cols, datums), cols)
    assert got == [b"\x01", struct.pack("<q", -5), varlena(b"short", True), None,
                   varlena(b"L" * 200, False), b"cstr", struct.pack("<i", 7), bytes(range(16))]


def test_missing_dropped_and_trailing_columns() -> None:
    cols = [col(1, "int4"), col(2, "text", dropped=True), col(3, "int8"),
            col(4, "int4", has_missing=True, missing_text="42"), col(5, "text"),
            col(6, "text", dropped=True, has_missing=True, missing_text="x")]
    tup = build(cols[:3], [struct.pack("<i", 1), varlena(b"gone", True), struct.pack("<q", 3)])
    assert heap.deform(tup, cols) == [struct.pack("<i", 1), None, struct.pack("<q", 3),
                                 MissingValue("42"), None, None]


def test_more_attributes_than_columns_is_an_error() -> None:
    cols = [col(1, "int4"), col(2, "int4")]
    tup = build([*cols, col(3, "int4")], [b"\x01\x00\x00\x00"] * 3)
    with pytest.raises(TupleDecodeError, match="3 attributes but the relation version "
                                               "describes 2 columns"):
        heap.deform(tup, cols)


def test_external_pointer_is_returned_whole() -> None:
    pointer = bytes([0x01, 18]) + struct.pack("<iIII", 5000, 4996, 12, 13)
    cols = [col(1, "int2"), col(2, "text"), col(3, "int4")]
    got = heap.deform(build(cols, [b"\x02\x00", pointer, b"\x09\x00\x00\x00"]), cols)
    assert got == [b"\x02\x00", pointer, b"\x09\x00\x00\x00"]
    bad = pointer[:1] + b"\x05" + pointer[2:]
    with pytest.raises(TupleDecodeError, match="column 'c2' \\(attnum 2\\): unknown TOAST "
                                               "pointer tag 5"):
        heap.deform(build(cols, [b"\x02\x00", bad, b"\x09\x00\x00\x00"]), cols)


@pytest.mark.parametrize("cut, column", [(1, 3), (3, 3), (8, 3), (20, 2)])
def test_truncated_tuple_names_the_column(cut: int, column: int) -> None:
    cols = [col(1, "int4"), col(2, "text"), col(3, "int8")]
    tup = build(cols, [b"\x01\x00\x00\x00", varlena(b"x" * 30, False), b"\x00" * 8])
    short = WalTuple(tup.infomask2, tup.infomask, tup.t_hoff, tup.data[:-cut])
    with pytest.raises(TupleDecodeError, match=f"tuple too short for column 'c{column}' "
                                               f"\\(attnum {column}\\): needs"):
        heap.deform(short, cols)


def test_bad_header_offsets() -> None:
    cols = [col(1, "int4")]
    with pytest.raises(TupleDecodeError, match="t_hoff=16"):
        heap.deform(WalTuple(1, 0, 16, b"\x00" * 8), cols)
    with pytest.raises(TupleDecodeError, match="null bitmap"):
        heap.deform(WalTuple(0x7FF, 1, 24, b"\x00" * 40), [col(i, "bool") for i in range(1, 2048)])


kinds = st.sampled_from(sorted(KINDS))


def _value(kind: str, draw: st.DrawFn) -> bytes:
    attlen, _ = KINDS[kind]
    if attlen > 0:
        return draw(st.binary(min_size=attlen, max_size=attlen))
    if attlen == -2:
        return draw(st.binary(max_size=10).map(lambda b: b.replace(b"\x00", b"x"))) + b"\x00"
    p = draw(st.binary(max_size=150))
    return varlena(p, short=len(p) < 126 and draw(st.booleans()))


@st.composite
def tuples(draw: st.DrawFn) -> tuple[list[Column], list[bytes | None]]:
    n = draw(st.integers(1, 40))
    cols = [col(i + 1, draw(kinds)) for i in range(n)]
    datums = [None if draw(st.booleans()) else _value(c_kind(c), draw) for c in cols]
    return cols, datums


def c_kind(c: Column) -> str:
    return next(k for k, v in KINDS.items() if v == (c.attlen, c.attalign))


@settings(max_examples=300, deadline=None)
@given(tuples())
def test_deform_inverts_the_layout(case: tuple[list[Column], list[bytes | None]]) -> None:
    cols, datums = case
    got = heap.deform(build(cols, datums), cols)
    expected = [d[:-1] if d is not None and c.attlen == -2 else d
                for c, d in zip(cols, datums, strict=True)]
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(tuples(), st.integers(1, 64))
def test_truncation_never_crashes(case: tuple[list[Column], list[bytes | None]],
                                  cut: int) -> None:
    cols, datums = case
    tup = build(cols, datums)
    short = WalTuple(tup.infomask2, tup.infomask, tup.t_hoff, tup.data[:max(0, len(tup.data)
                                                                            - cut)])
    try:
        heap.deform(short, cols)
    except TupleDecodeError as exc:
        assert "column 'c" in str(exc) or "t_hoff" in str(exc) or "bitmap" in str(exc)
