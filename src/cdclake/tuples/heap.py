# cython: boundscheck=False, wraparound=False, cdivision=True
"""Heap tuple deforming: a logged tuple's bytes -> one raw datum per pg_attribute slot.

This is ``heap_deform_tuple`` (access/common/heaptuple.c) without a TupleDesc: the dictionary's
:class:`~cdclake.tuples.desc.Column` rows carry the attlen/attalign that drive the walk.
Dropped columns are walked too (old tuples still hold their bytes) but yield None, so the
result lines up with ``RelationVersion.columns`` by index.

Alignment is relative to the on-disk tuple start. ``t_hoff`` is MAXALIGNed, so aligning the
offset inside the attribute area (``data[t_hoff - 23:]``) gives the same padding.

:func:`deform` runs once per tuple a decoder reads, so this file is compiled as itself
(Cython's pure-Python mode, ``_heap.pxd``): the walk reads the bytes through a C pointer and
each relation's columns through a :class:`Walk` (their lengths, alignments and dropped flags
in lists, made once per columns tuple), with no Python attribute read per column.
"""

from __future__ import annotations

from collections.abc import Sequence

from cdclake import native
from cdclake.errors import TupleDecodeError
from cdclake.tuples.desc import Column, MissingValue
from cdclake.wal.record import SIZEOF_HEAP_TUPLE_HEADER, WalTuple

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._ints import le_uint
    from cython.cimports.cdclake.wal._primitives import bytes_of, span
    from cython.cimports.libc.stdlib import free, malloc
else:
    from cdclake.tuples.ints import le_uint
    from cdclake.wal.primitives import bytes_of


HEAP_HASNULL = 0x0001
HEAP_NATTS_MASK = 0x07FF

#: typalign -> (alignment - 1), for ``(off + m) & ~m``
ALIGN_MASK = {"c": 0, "s": 1, "i": 3, "d": 7}


class Walk:
    """A relation's columns as :func:`deform` walks them, made once per ``columns`` tuple
    (kept by its identity, with ``columns`` itself so the identity stays valid): each
    column's attlen, alignment mask and whether it is dropped, in C arrays where compiled."""

    __slots__ = ("attlen", "columns", "dropped", "mask", "n")

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = columns
        self.n = len(columns)
        if cython.compiled:  # the arrays _heap.pxd declares, freed by __dealloc__
            size = max(1, self.n)
            self.attlen = cython.cast(cython.p_int, malloc(size * cython.sizeof(cython.int)))
            self.mask = cython.cast(cython.p_int, malloc(size * cython.sizeof(cython.int)))
            self.dropped = cython.cast(cython.p_char, malloc(size))
            if not self.attlen or not self.mask or not self.dropped:
                raise MemoryError()
        else:
            self.attlen = [0] * self.n
            self.mask = [0] * self.n
            self.dropped = [False] * self.n
        for i in range(self.n):
            c = columns[i]
            self.attlen[i] = c.attlen
            self.mask[i] = ALIGN_MASK[c.attalign]
            self.dropped[i] = c.dropped

    def __dealloc__(self) -> None:  # compiled only: Python never calls it
        if cython.compiled:
            free(self.attlen)
            free(self.mask)
            free(self.dropped)


_walks: dict[int, Walk] = {}


def walk_of(columns: Sequence[Column]) -> Walk:
    w = _walks.get(id(columns))
    if w is not None and w.columns is columns:
        return w
    if len(_walks) > 4096:
        _walks.clear()
    w = _walks[id(columns)] = Walk(columns)
    return w


def external_size(tag: int) -> int:
    """Size of an external TOAST pointer datum by vartag (varatt.h VARTAG_SIZE): a 2-byte
    header plus varatt_indirect (8), varatt_expanded (8) or varatt_external (16); 0 for a tag
    PostgreSQL does not write."""
    if tag == 1 or tag == 2 or tag == 3:
        return 10
    return 18 if tag == 18 else 0


def deform(tup: WalTuple, columns: Sequence[Column]) -> list[object]:
    """One entry per column: None (NULL or dropped), MissingValue, or the raw datum bytes.

    Fixed-length datums are their attlen bytes; varlenas the whole datum with its header
    (1-byte, 4-byte, compressed or an external TOAST pointer); cstrings without the NUL.
    """
    data = tup.data
    raw = data if type(data) is bytes else bytes(data)
    bp = bytes_of(raw)
    total = len(raw)
    natts = tup.infomask2 & HEAP_NATTS_MASK
    hasnulls = tup.infomask & HEAP_HASNULL != 0
    base = tup.t_hoff
    start = base - SIZEOF_HEAP_TUPLE_HEADER
    if start < 0 or start > total:
        raise TupleDecodeError(
            f"tuple header offset t_hoff={base} lies outside the {total + 23}-byte tuple")
    w = walk_of(columns)
    if natts > w.n:
        raise TupleDecodeError(
            f"tuple has {natts} attributes but the relation version describes "
            f"{w.n} columns: the dictionary does not describe this tuple")
    if hasnulls and (natts + 7) >> 3 > start:
        raise TupleDecodeError(
            f"tuple null bitmap for {natts} attributes does not fit before t_hoff={base}")
    # offsets are relative to the attribute area (t_hoff is MAXALIGNed: the same padding);
    # ``base`` turns them back into tuple offsets for messages
    end = total - start
    off = 0
    out: list[object] = [None] * w.n
    for i in range(w.n):
        if i >= natts:
            col = columns[i]
            if col.has_missing and not col.dropped:
                out[i] = MissingValue(col.missing_text)  # type: ignore[arg-type]
            continue
        if hasnulls and not (bp[i >> 3] >> (i & 7)) & 1:
            continue
        attlen = w.attlen[i]
        if attlen > 0:
            m = w.mask[i]
            off = (off + m) & ~m
            nxt = off + attlen
            if nxt > end:
                ran_out(columns[i], base + off, attlen, base + end)
        elif attlen == -1:
            if off >= end:
                ran_out(columns[i], base + off, 1, base + end)
            b0 = bp[start + off]
            if b0 == 0:  # a zero byte where a varlena starts is alignment padding
                m = w.mask[i]
                off = (off + m) & ~m
                if off >= end:
                    ran_out(columns[i], base + off, 1, base + end)
                b0 = bp[start + off]
            if b0 & 1:
                if b0 == 1:
                    if off + 2 > end:
                        ran_out(columns[i], base + off, 2, base + end)
                    size = external_size(bp[start + off + 1])
                    if size == 0:
                        col = columns[i]
                        raise TupleDecodeError(
                            f"column {col.name!r} (attnum {col.attnum}): unknown TOAST "
                            f"pointer tag {bp[start + off + 1]} at tuple offset {off + base}")
                else:
                    size = b0 >> 1
            else:
                if off + 4 > end:
                    ran_out(columns[i], base + off, 4, base + end)
                size = le_uint(bp, start + off, 4) >> 2
                if size < 4:
                    col = columns[i]
                    raise TupleDecodeError(
                        f"column {col.name!r} (attnum {col.attnum}): varlena length {size} "
                        f"at tuple offset {off + base} is impossible")
            nxt = off + size
            if nxt > end:
                ran_out(columns[i], base + off, size, base + end)
        elif attlen == -2:
            m = w.mask[i]
            off = (off + m) & ~m
            nxt = off
            while nxt < end and bp[start + nxt] != 0:
                nxt += 1
            if nxt >= end:
                ran_out(columns[i], base + off, end - off + 1, base + end)
            if not w.dropped[i]:
                out[i] = (span(bp, start + off, start + nxt) if cython.compiled
                          else raw[start + off:start + nxt])
            off = nxt + 1
            continue
        else:
            col = columns[i]
            raise TupleDecodeError(
                f"column {col.name!r} (attnum {col.attnum}) has impossible attlen {attlen}")
        if not w.dropped[i]:  # compiled, the reader's span (no slice object); Python slices
            out[i] = (span(bp, start + off, start + nxt) if cython.compiled
                      else raw[start + off:start + nxt])
        off = nxt
    return out


def ran_out(col: Column, at: int, need: int, end: int) -> None:
    raise TupleDecodeError(
        f"tuple too short for column {col.name!r} (attnum {col.attnum}): needs {need} bytes at "
        f"tuple offset {at}, but the tuple ends at offset {end}")


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    deform = native.twin(deform, "cdclake.tuples._heap")
