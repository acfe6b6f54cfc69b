"""The compiled test_decoding line (``test_decoding.py`` compiled as itself) against the same
module run by Python, on random and malformed datums of the types it formats without calling a
codec (``_inline.pxd``: int2, int4, int8, UTF-8 text, bool, uuid, bytea, float8): the same
lines, and the same error where Python raises one. No server."""

from __future__ import annotations

import random
import struct
from typing import Any

from cdclake import native
from cdclake.catalog.model import Column, RelationVersion
from cdclake.decoding.changes import DELETE, INSERT, UPDATE, Change, TxnInfo
from cdclake.decoding.plugins import _test_decoding  # type: ignore[attr-defined]
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.rows import RowLayout
from tests.unit.tuples.builtin_types import BUILTIN

#: (type oid, attlen) of the columns, in order: int2, int4, int8, text, int4, text, bool,
#: uuid, bytea, float8
TYPES = ((21, 2), (23, 4), (20, 8), (25, -1), (23, 4), (25, -1), (16, 1), (2950, 16),
         (17, -1), (701, 8))

REL = RelationVersion(
    oid=1, db_oid=5, tablespace=1663, relfilenode=1, schema="public", name="t",
    qualified="public.t", relkind="r", persistence="p", replident="d",
    columns=tuple(Column(attnum=i + 1, name=f"c{i}", quoted=f"c{i}", type_oid=oid, typmod=-1,
                         attlen=n, attalign="i", attbyval=n > 0)
                  for i, (oid, n) in enumerate(TYPES)),
    key_attnums=(1,), valid_from=0)


class Given(RowLayout):
    """A layout whose tuples are the deformed datums themselves."""

    def datums(self, tup: Any, lsn: int) -> list[object]:
        return list(tup)


def _varlena(payload: bytes) -> bytes:
    return (bytes([(len(payload) + 1) << 1 | 1]) + payload if len(payload) < 127
            else struct.pack("<I", (len(payload) + 4) << 2) + payload)


def _datum(rng: random.Random, oid: int, attlen: int) -> object:
    roll = rng.random()
    if roll < 0.1:
        return None
    if attlen > 0:
        if roll < 0.2:  # the wrong size: the codec's error
            return rng.randbytes(rng.choice([0, 1, 3, 5, 9, 15, 17]))
        if oid in (16, 2950, 701):  # any bits: bools other than 0/1, every double, NaNs
            return rng.randbytes(attlen)
        fmt = {2: "<h", 4: "<i", 8: "<q"}[attlen]
        bits = attlen * 8
        edge = rng.choice([0, -1, 1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1,
                           rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))])
        return struct.pack(fmt, edge)
    if oid == 17:
        return _varlena(rng.randbytes(rng.randrange(0, 200)))
    if roll < 0.2:  # not UTF-8
        return _varlena(b"\xff\xfe" + rng.randbytes(3))
    text = "".join(rng.choice("ab'c\u00e9\u4e2d\n\\ ") for _ in range(rng.randrange(0, 200)))
    return _varlena(text.encode())


def _line(plugin_change: Any, tup: tuple[object, ...], action: int) -> str:
    lines: list[str] = []
    plugin = TestDecoding(lines.append, BUILTIN, version=15)
    plugin.layouts.get = lambda rel: layout  # type: ignore[method-assign]
    change = Change(action, 0x100, 0, None, tup if action != INSERT else None,
                    tup if action != DELETE else None, True, 0)
    try:
        plugin_change(plugin, TxnInfo(7, 0x100, 0x200, 0, 0), REL, action, change, {})
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "\n".join(lines)


layout = Given(REL, BUILTIN)


def test_the_compiled_line_equals_the_reference() -> None:
    python = next(py for _m, name, py, _c in native._twins if name == "TestDecoding.change")
    rng = random.Random(13)
    for _ in range(600):
        tup = tuple(_datum(rng, oid, n) for oid, n in TYPES)
        action = rng.choice([INSERT, UPDATE, DELETE])
        with native.use_python():
            want = _line(python, tup, action)
        assert _line(_test_decoding.change, tup, action) == want, tup


def _framed(include_xids: bool, skip_empty_xacts: bool, changes: int) -> list[str]:
    """A transaction of ``changes`` changes through the bound begin, change and commit."""
    lines: list[str] = []
    begins: list[str] = []
    plugin = TestDecoding(lines.append, BUILTIN, version=15, include_xids=include_xids,
                          skip_empty_xacts=skip_empty_xacts)
    plugin.write_begin = begins.append  # as a parallel decode keys BEGIN lines apart
    plugin.layouts.get = lambda rel: layout  # type: ignore[method-assign]
    txn = TxnInfo(7, 0x100, 0x200, 0, 0)
    plugin.begin(txn)
    for i in range(changes):
        row = (struct.pack("<h", i), struct.pack("<i", i), struct.pack("<q", i), None,
               struct.pack("<i", i), None, b"\1", None, None, None)
        plugin.change(txn, REL, INSERT, Change(INSERT, 0x100 + i, 0, None, None, row, True, 0),
                      {})
    plugin.commit(txn)
    return [*begins, "--", *lines]


def test_the_compiled_framing_equals_the_reference() -> None:
    # BEGIN and COMMIT lines: with and without xids, empty transactions skipped or not
    cases = [(x, s, n) for x in (True, False) for s in (True, False) for n in (0, 1, 3)]
    with native.use_python():
        want = [_framed(*case) for case in cases]
    with native.use_python(False):
        assert type(TestDecoding.commit).__name__ == "cython_function_or_method"
        got = [_framed(*case) for case in cases]
    assert got == want
    assert ["BEGIN 7", "--", "table public.t: INSERT: c0[smallint]:0 c1[integer]:0 "
            "c2[bigint]:0 c3[text]:null c4[integer]:0 c5[text]:null c6[boolean]:true "
            "c7[uuid]:null c8[bytea]:null c9[double precision]:null", "COMMIT 7"] in want
    assert ["--"] in want and ["BEGIN", "--", "COMMIT"] in want
