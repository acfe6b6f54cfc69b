"""Heap tuple deforming: a logged tuple's bytes -> one raw datum per pg_attribute slot.

This is ``heap_deform_tuple`` (access/common/heaptuple.c) without a TupleDesc: the dictionary's
:class:`~cdclake.tuples.desc.Column` rows carry the attlen/attalign that drive the walk.
Dropped columns are walked too (old tuples still hold their bytes) but yield None, so the
result lines up with ``RelationVersion.columns`` by index.

Alignment is relative to the on-disk tuple start. ``t_hoff`` is MAXALIGNed, so aligning the
offset inside the attribute area (``data[t_hoff - 23:]``) gives the same padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdclake import native
from cdclake.errors import TupleDecodeError
from cdclake.tuples.desc import Column
from cdclake.wal.record import SIZEOF_HEAP_TUPLE_HEADER, WalTuple

HEAP_HASNULL = 0x0001
HEAP_NATTS_MASK = 0x07FF

#: typalign -> (alignment - 1), for ``(off + m) & ~m``
ALIGN_MASK = {"c": 0, "s": 1, "i": 3, "d": 7}

#: size of an external TOAST pointer datum by vartag (varatt.h VARTAG_SIZE): 2-byte header
#: plus varatt_indirect (8), varatt_expanded (8) or varatt_external (16)
_EXTERNAL_SIZE = {1: 10, 2: 10, 3: 10, 18: 18}


@dataclass(frozen=True, slots=True)
class MissingValue:
    """A column added (ADD COLUMN ... DEFAULT) after the tuple was written: the tuple is
    shorter than the relation, and PostgreSQL supplies ``attmissingval`` instead of NULL.
    ``text`` is that value's text output, as captured with the dictionary."""

    text: str


def deform(tup: WalTuple, columns: Sequence[Column]) -> list[object]:
    """One entry per column: None (NULL or dropped), MissingValue, or the raw datum bytes.

    Fixed-length datums are their attlen bytes; varlenas the whole datum with its header
    (1-byte, 4-byte, compressed or an external TOAST pointer); cstrings without the NUL.
    """
    data = tup.data
    if not isinstance(data, bytes):
        data = bytes(data)
    end = len(data)
    natts = tup.infomask2 & HEAP_NATTS_MASK
    hasnulls = tup.infomask & HEAP_HASNULL
    off = tup.t_hoff - SIZEOF_HEAP_TUPLE_HEADER
    if off < 0 or off > end:
        raise TupleDecodeError(
            f"tuple header offset t_hoff={tup.t_hoff} lies outside the {end + 23}-byte tuple")
    if natts > len(columns):
        raise TupleDecodeError(
            f"tuple has {natts} attributes but the relation version describes "
            f"{len(columns)} columns: the dictionary does not describe this tuple")
    if hasnulls and (natts + 7) >> 3 > off:
        raise TupleDecodeError(
            f"tuple null bitmap for {natts} attributes does not fit before t_hoff={tup.t_hoff}")
    nullbits = data[:off] if hasnulls else b""
    # Work relative to the attribute area: t_hoff is MAXALIGNed, so alignment inside the
    # area equals alignment relative to the tuple start.
    data = data[off:]
    end = len(data)
    off = 0
    base = tup.t_hoff
    out: list[object] = []
    append = out.append
    align_mask = ALIGN_MASK
    i = 0
    for col in columns:
        if i >= natts:
            append(MissingValue(col.missing_text)  # type: ignore[arg-type]
                   if col.has_missing and not col.dropped else None)
            i += 1
            continue
        if hasnulls and not (nullbits[i >> 3] >> (i & 7)) & 1:
            append(None)
            i += 1
            continue
        attlen = col.attlen
        if attlen > 0:
            m = align_mask[col.attalign]
            off = (off + m) & ~m
            nxt = off + attlen
            if nxt > end:
                _ran_out(col, base + off, attlen, base + end)
            if col.dropped:
                append(None)
            else:
                append(data[off:nxt])
            off = nxt
        elif attlen == -1:
            if off >= end:
                _ran_out(col, base + off, 1, base + end)
            b0 = data[off]
            if b0 == 0:
                # a zero byte where a varlena starts is alignment padding
                m = align_mask[col.attalign]
                off = (off + m) & ~m
                if off >= end:
                    _ran_out(col, base + off, 1, base + end)
                b0 = data[off]
            if b0 & 1:
                if b0 == 1:
                    if off + 2 > end:
                        _ran_out(col, base + off, 2, base + end)
                    size = _EXTERNAL_SIZE.get(data[off + 1], 0)
                    if size == 0:
                        raise TupleDecodeError(
                            f"column {col.name!r} (attnum {col.attnum}): unknown TOAST "
                            f"pointer tag {data[off + 1]} at tuple offset "
                            f"{off + base}")
                else:
                    size = b0 >> 1
            else:
                if off + 4 > end:
                    _ran_out(col, base + off, 4, base + end)
                size = int.from_bytes(data[off:off + 4], "little") >> 2
                if size < 4:
                    raise TupleDecodeError(
                        f"column {col.name!r} (attnum {col.attnum}): varlena length {size} "
                        f"at tuple offset {off + base} is impossible")
            nxt = off + size
            if nxt > end:
                _ran_out(col, base + off, size, base + end)
            if col.dropped:
                append(None)
            else:
                append(data[off:nxt])
            off = nxt
        elif attlen == -2:
            m = align_mask[col.attalign]
            off = (off + m) & ~m
            nul = data.find(b"\x00", off)
            if nul < 0:
                _ran_out(col, base + off, end - off + 1, base + end)
            append(None if col.dropped else data[off:nul])
            off = nul + 1
        else:
            raise TupleDecodeError(
                f"column {col.name!r} (attnum {col.attnum}) has impossible attlen {attlen}")
        i += 1
    return out


def _ran_out(col: Column, at: int, need: int, end: int) -> None:
    raise TupleDecodeError(
        f"tuple too short for column {col.name!r} (attnum {col.attnum}): needs {need} bytes at "
        f"tuple offset {at}, but the tuple ends at offset {end}")


deform = native.twin(deform, "cdclake.tuples._heap")
