"""pglz, lz4 and varlena/TOAST handling without a server: datums PostgreSQL compressed
(captured by tests/oracle/tuples/compressed_fixtures.py), a naive reference for pglz streams,
and the error paths (truncated, corrupt, bad pointers) naming what is wrong and where."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake import pglz
from cdclake.errors import TupleDecodeError
from cdclake.tuples.codecs import codec_for
from cdclake.tuples.varlena import (
    ToastPointer,
    is_external,
    parse_toast_pointer,
    payload,
    reassemble,
    toast_chunk,
)
from cdclake.wal.record import WalTuple
from tests.unit.tuples.builtin_types import BUILTIN

FIXTURES = json.loads((Path(__file__).parent / "fixtures" / "compressed.json").read_text())
TYPE_OIDS = {"text": 25, "jsonb": 3802, "int4[]": 1007}


@pytest.mark.parametrize("fx", FIXTURES, ids=[f"{f['method']}-{f['name']}" for f in FIXTURES])
def test_compressed_datums_from_postgresql_decode_to_the_server_text(fx: dict[str, str]) -> None:
    datum = bytes.fromhex(fx["datum"])
    assert datum[0] & 3 == 2  # inline-compressed 4-byte header
    assert datum[7] >> 6 == {"pglz": 0, "lz4": 1}[fx["method"]]
    codec = codec_for(TYPE_OIDS[fx["type"]], -1, BUILTIN, column="v")
    assert codec.text(payload(datum)) == fx["text"]


def _pglz_fixture() -> tuple[bytes, int, bytes]:
    """(compressed stream, raw size, expected) of the 'words' pglz fixture."""
    fx = next(f for f in FIXTURES if f["name"] == "words" and f["method"] == "pglz")
    datum = bytes.fromhex(fx["datum"])
    rawsize = struct.unpack_from("<I", datum, 4)[0] & 0x3FFFFFFF
    return datum[8:], rawsize, fx["text"].encode()


def test_pglz_decompress_direct() -> None:
    stream, rawsize, expected = _pglz_fixture()
    assert pglz.decompress(stream, rawsize) == expected
    # without check_complete, output may stop early (as for slices)
    assert pglz.decompress(stream, 100, check_complete=False) == expected[:100]


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s[:-5], "cut off|corrupt"),  # truncated: produces too little
    (lambda s: s + b"\x00", "corrupt"),  # trailing input left over
    (lambda s: b"\x01\xff\xff" + s, "outside output"),  # back-reference before any output
])
def test_pglz_corrupt_streams_raise(mutate, message) -> None:  # type: ignore[no-untyped-def]
    stream, rawsize, _ = _pglz_fixture()
    with pytest.raises(pglz.PglzError, match=message):
        pglz.decompress(mutate(stream), rawsize)


def test_corrupt_inline_datum_names_the_datum() -> None:
    fx = next(f for f in FIXTURES if f["name"] == "words" and f["method"] == "pglz")
    good = bytes.fromhex(fx["datum"])
    body = good[4:8] + b"\x01\xff\xff" + good[8:]  # a back-reference before any output
    datum = struct.pack("<I", ((len(body) + 4) << 2) | 2) + body
    with pytest.raises(TupleDecodeError, match=r"column 'body': pglz"):
        payload(datum, what="column 'body'")
    lz = bytes.fromhex(next(f for f in FIXTURES if f["method"] == "lz4")["datum"])
    cut = lz[4:-3]  # the lz4 block loses its last bytes, the header is kept consistent
    with pytest.raises(TupleDecodeError, match="x: lz4"):
        payload(struct.pack("<I", ((len(cut) + 4) << 2) | 2) + cut, what="x")
    bad = bytearray(lz)
    bad[4:8] = struct.pack("<I", (3 << 30) | 10)  # compression method 3 does not exist
    with pytest.raises(TupleDecodeError, match="unknown compression method 3"):
        payload(bytes(bad))


# -- a naive reference for pglz streams -------------------------------------------------------

tokens = st.lists(st.one_of(
    st.tuples(st.just("lit"), st.integers(0, 255)),
    st.tuples(st.just("ref"), st.integers(1, 4095), st.integers(3, 273)),
), min_size=1, max_size=60)


def _encode(toks: list[tuple[int | str, ...]]) -> tuple[bytes, bytes]:
    """Encode tokens as a pglz stream, and produce the output byte by byte (the reference)."""
    out = bytearray()
    stream = bytearray()
    for i in range(0, len(toks), 8):
        group = toks[i:i + 8]
        ctrl = 0
        body = bytearray()
        for bit, tok in enumerate(group):
            if tok[0] == "lit":
                body.append(int(tok[1]))
                out.append(int(tok[1]))
                continue
            off = min(int(tok[1]), len(out)) if out else 0
            if off == 0:  # nothing to refer to yet: a literal instead
                body.append(0x41)
                out.append(0x41)
                continue
            length = int(tok[2])
            ctrl |= 1 << bit
            if length >= 18:
                body += bytes([((off >> 4) & 0xF0) | 15, off & 0xFF, length - 18])
            else:
                body += bytes([((off >> 4) & 0xF0) | (length - 3), off & 0xFF])
            for _ in range(length):
                out.append(out[-off])
        stream.append(ctrl)
        stream += body
    return bytes(stream), bytes(out)


@settings(max_examples=300, deadline=None)
@given(tokens)
def test_pglz_matches_a_naive_reference(toks: list[tuple[int | str, ...]]) -> None:
    stream, expected = _encode(toks)
    assert pglz.decompress(stream, len(expected)) == expected


# -- varlena headers and TOAST pointers -------------------------------------------------------


def _pointer(rawsize: int, extinfo: int, valueid: int = 77, toastrelid: int = 16400,
             tag: int = 18) -> bytes:
    return bytes([0x01, tag]) + struct.pack("<iIII", rawsize, extinfo, valueid, toastrelid)


def test_payload_of_short_and_long_headers() -> None:
    assert payload(bytes([(4 << 1) | 1]) + b"abc") == b"abc"
    assert payload(struct.pack("<I", 7 << 2) + b"xyz") == b"xyz"
    with pytest.raises(TupleDecodeError, match="says 9 bytes, have 7"):
        payload(struct.pack("<I", 9 << 2) + b"xyz")
    with pytest.raises(TupleDecodeError, match="external TOAST pointer"):
        payload(_pointer(1000, 996))


def test_toast_pointers() -> None:
    raw = _pointer(10004, 10000)
    assert is_external(raw) and not is_external(b"\x07abc")
    assert parse_toast_pointer(raw) == ToastPointer(10004, 10000, None, 77, 16400)
    assert parse_toast_pointer(_pointer(10004, (1 << 30) | 3000)).compression == "lz4"
    assert parse_toast_pointer(_pointer(10004, 3000)).compression == "pglz"
    for tag, kind in ((1, "indirect"), (2, "expanded read-only"), (3, "expanded read-write"),
                      (9, "unknown")):
        with pytest.raises(TupleDecodeError, match=f"vartag {tag} \\({kind}\\)"):
            parse_toast_pointer(_pointer(100, 96, tag=tag))
    with pytest.raises(TupleDecodeError, match="has 12 bytes"):
        parse_toast_pointer(_pointer(100, 96)[:12])
    with pytest.raises(TupleDecodeError, match="TOAST value 77 in toast relation 16400 uses "
                                               "unknown compression method 2"):
        parse_toast_pointer(_pointer(10004, (2 << 30) | 3000))


def test_reassemble_uncompressed_and_compressed() -> None:
    value = bytes(range(256)) * 20
    ptr = parse_toast_pointer(_pointer(len(value) + 4, len(value)))
    chunks = [value[i:i + 1996] for i in range(0, len(value), 1996)]
    assert reassemble(ptr, chunks) == value
    with pytest.raises(TupleDecodeError, match=r"TOAST value 77 in toast relation 16400: 2 "
                                               r"chunks hold 3992 bytes, the pointer says 5120"):
        reassemble(ptr, chunks[:2])
    # compressed: the chunks hold va_tcinfo + the stream
    stream, rawsize, expected = _pglz_fixture()
    stored = struct.pack("<I", rawsize) + stream
    ptr = parse_toast_pointer(_pointer(rawsize + 4, len(stored)))
    assert ptr.compression == "pglz"
    assert reassemble(ptr, [stored[:100], stored[100:]]) == expected
    with pytest.raises(TupleDecodeError, match="does not match the pointer"):
        reassemble(parse_toast_pointer(_pointer(rawsize + 5, len(stored))), [stored])
    broken = stored[:4] + b"\x01\xff\xff" + stored[4:]
    ptr = parse_toast_pointer(_pointer(rawsize + 4, len(broken)))
    with pytest.raises(TupleDecodeError, match="TOAST value 77 in toast relation 16400: pglz"):
        reassemble(ptr, [broken])


#: TOAST_MAX_CHUNK_SIZE on 8 kB pages (access/heaptoast.h): EXTERN_TUPLE_MAX_SIZE (2032, four
#: tuples a page) less MAXALIGN(SizeofHeapTupleHeader), chunk_id, chunk_seq and a 4-byte header
TOAST_MAX_CHUNK_SIZE = 2032 - 24 - 4 - 4 - 4


def _toast_row(chunk_id: int, seq: int, data: bytes) -> WalTuple:
    """A TOAST relation row as heap_insert logs it: no nulls, t_hoff MAXALIGN(23) = 24, so the
    logged data (from tuple offset 23) is one padding byte, then the attribute area: chunk_id
    and chunk_seq, and chunk_data with a 4-byte header (plain storage: never a 1-byte one)."""
    body = struct.pack("<Ii", chunk_id, seq) + struct.pack("<I", (len(data) + 4) << 2) + data
    return WalTuple(infomask2=3, infomask=0x0002, t_hoff=24, data=b"\x00" + body)


def test_toast_chunk_rows() -> None:
    assert toast_chunk(_toast_row(501, 2, b"hello")) == (501, 2, b"hello")
    short = WalTuple(3, 2, 24, b"\x00" + struct.pack("<Ii", 9, 0) + bytes([(3 << 1) | 1]) + b"ab")
    assert toast_chunk(short) == (9, 0, b"ab")
    with pytest.raises(TupleDecodeError, match="3 non-null attributes"):
        toast_chunk(WalTuple(2, 2, 24, b"\x00" + struct.pack("<Ii", 9, 0)))
    cut = _toast_row(501, 2, b"hello")
    with pytest.raises(TupleDecodeError, match=(
            r"^TOAST chunk row: tuple too short for column 'chunk_data' \(attnum 3\): needs 9 "
            r"bytes at tuple offset 32, but the tuple ends at offset 39$")):
        toast_chunk(WalTuple(cut.infomask2, cut.infomask, cut.t_hoff, cut.data[:-2]))


def test_the_last_chunk_of_a_22400_byte_value() -> None:
    """Issue 33: the last chunk of ``string_agg(md5('five' || g), '')`` over 700 rows (12
    chunks, the last 444 bytes), laid out as PostgreSQL 15 and 18 write it (pageinspect shows
    these bytes, the chunk_id aside). Its header, VARSIZE 448 << 2 = 0x700, starts with a
    zero byte at an int-aligned offset: the first byte of the length word, not padding."""
    value = "".join(hashlib.md5(f"five{g}".encode()).hexdigest() for g in range(1, 701)).encode()
    assert len(value) == 11 * TOAST_MAX_CHUNK_SIZE + 444
    tup = WalTuple(infomask2=3, infomask=0x0802, t_hoff=24, data=bytes.fromhex(
        "00"          # tuple offset 23: the padding up to t_hoff (no null bitmap)
        "32400000"    # 24: chunk_id 16434 (oid)
        "0b000000"    # 28: chunk_seq 11 (int4)
        "00070000"    # 32: chunk_data's 4-byte varlena header, VARSIZE 448
    ) + value[-444:])  # 36: the data
    assert toast_chunk(tup) == (16434, 11, value[-444:])


def test_toast_chunk_rows_of_every_chunk_length() -> None:
    """Every length a chunk can have, 1 to TOAST_MAX_CHUNK_SIZE; one header in 64 (the
    lengths 60, 124, ... 1980) starts with a zero byte."""
    data = bytes(range(256)) * 8
    for n in range(1, TOAST_MAX_CHUNK_SIZE + 1):
        assert toast_chunk(_toast_row(70000, 5, data[:n])) == (70000, 5, data[:n]), n
