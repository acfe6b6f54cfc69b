# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.tuples.heap.deform` (see :mod:`cdclake.native`).

The same walk over the same bytes with the same errors; what it adds is a per-relation plan
(attlen, alignment, dropped) in C arrays, built once per ``columns`` tuple, so the loop reads no
Python attributes. The pure-Python function stays the reference: tests run both.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromVoidPtr
from libc.stdlib cimport free, malloc

from cdclake.errors import TupleDecodeError
from cdclake.tuples.heap import _ran_out, MissingValue

cdef int SIZEOF_HEAP_TUPLE_HEADER = 23
cdef int HEAP_HASNULL = 0x0001
cdef int HEAP_NATTS_MASK = 0x07FF


cdef class _Plan:
    """A relation's columns as C arrays; ``columns`` is kept so the cache key stays valid."""

    cdef object columns
    cdef Py_ssize_t n
    cdef int *attlen
    cdef int *mask
    cdef char *dropped

    def __cinit__(self, columns):
        self.columns = columns
        self.n = len(columns)
        self.attlen = <int *> malloc(max(1, self.n) * sizeof(int))
        self.mask = <int *> malloc(max(1, self.n) * sizeof(int))
        self.dropped = <char *> malloc(max(1, self.n))
        if not self.attlen or not self.mask or not self.dropped:
            raise MemoryError()
        align = {"c": 0, "s": 1, "i": 3, "d": 7}
        for i, col in enumerate(columns):
            self.attlen[i] = col.attlen
            self.mask[i] = align[col.attalign]
            self.dropped[i] = 1 if col.dropped else 0

    def __dealloc__(self):
        free(self.attlen)
        free(self.mask)
        free(self.dropped)


cdef dict _plans = {}


cdef _Plan _plan(columns):
    plan = _plans.get(PyLong_FromVoidPtr(<void *> columns))
    if plan is not None and (<_Plan> plan).columns is columns:
        return <_Plan> plan
    if len(_plans) > 4096:
        _plans.clear()
    plan = _Plan(columns)
    _plans[PyLong_FromVoidPtr(<void *> columns)] = plan
    return <_Plan> plan


cdef inline Py_ssize_t _external_size(unsigned char tag):
    if tag == 1 or tag == 2 or tag == 3:
        return 10
    if tag == 18:
        return 18
    return 0


def deform(tup, columns):
    """See :func:`cdclake.tuples.heap.deform`."""
    data = tup.data
    if not isinstance(data, bytes):
        data = bytes(data)
    cdef bytes raw = data
    cdef const unsigned char *buf = raw
    cdef Py_ssize_t total = len(raw)
    cdef int natts = tup.infomask2 & HEAP_NATTS_MASK
    cdef bint hasnulls = tup.infomask & HEAP_HASNULL
    cdef int t_hoff = tup.t_hoff
    cdef Py_ssize_t start = t_hoff - SIZEOF_HEAP_TUPLE_HEADER
    if start < 0 or start > total:
        raise TupleDecodeError(
            f"tuple header offset t_hoff={t_hoff} lies outside the {total + 23}-byte tuple")
    cdef _Plan plan = _plan(columns)
    if natts > plan.n:
        raise TupleDecodeError(
            f"tuple has {natts} attributes but the relation version describes "
            f"{plan.n} columns: the dictionary does not describe this tuple")
    if hasnulls and (natts + 7) >> 3 > start:
        raise TupleDecodeError(
            f"tuple null bitmap for {natts} attributes does not fit before t_hoff={t_hoff}")
    # offsets are relative to the attribute area (t_hoff is MAXALIGNed); ``base`` turns them
    # back into tuple offsets for messages
    cdef const unsigned char *area = buf + start
    cdef Py_ssize_t end = total - start
    cdef Py_ssize_t off = 0, nxt, size
    cdef int base = t_hoff
    cdef int attlen, m
    cdef unsigned char b0
    cdef Py_ssize_t i
    cdef list out = [None] * plan.n
    for i in range(plan.n):
        if i >= natts:
            col = columns[i]
            if col.has_missing and not col.dropped:
                out[i] = MissingValue(col.missing_text)
            continue
        if hasnulls and not (buf[i >> 3] >> (i & 7)) & 1:
            continue
        attlen = plan.attlen[i]
        if attlen > 0:
            m = plan.mask[i]
            off = (off + m) & ~m
            nxt = off + attlen
            if nxt > end:
                _ran_out(columns[i], base + off, attlen, base + end)
            if not plan.dropped[i]:
                out[i] = PyBytes_FromStringAndSize(<const char *> area + off, attlen)
            off = nxt
        elif attlen == -1:
            if off >= end:
                _ran_out(columns[i], base + off, 1, base + end)
            b0 = area[off]
            if b0 == 0:
                # a zero byte where a varlena starts is alignment padding
                m = plan.mask[i]
                off = (off + m) & ~m
                if off >= end:
                    _ran_out(columns[i], base + off, 1, base + end)
                b0 = area[off]
            if b0 & 1:
                if b0 == 1:
                    if off + 2 > end:
                        _ran_out(columns[i], base + off, 2, base + end)
                    size = _external_size(area[off + 1])
                    if size == 0:
                        col = columns[i]
                        raise TupleDecodeError(
                            f"column {col.name!r} (attnum {col.attnum}): unknown TOAST "
                            f"pointer tag {area[off + 1]} at tuple offset {off + base}")
                else:
                    size = b0 >> 1
            else:
                if off + 4 > end:
                    _ran_out(columns[i], base + off, 4, base + end)
                size = (area[off] | (area[off + 1] << 8) | (area[off + 2] << 16)
                        | (<Py_ssize_t> area[off + 3] << 24)) >> 2
                if size < 4:
                    col = columns[i]
                    raise TupleDecodeError(
                        f"column {col.name!r} (attnum {col.attnum}): varlena length {size} "
                        f"at tuple offset {off + base} is impossible")
            nxt = off + size
            if nxt > end:
                _ran_out(columns[i], base + off, size, base + end)
            if not plan.dropped[i]:
                out[i] = PyBytes_FromStringAndSize(<const char *> area + off, size)
            off = nxt
        elif attlen == -2:
            m = plan.mask[i]
            off = (off + m) & ~m
            nxt = off
            while nxt < end and area[nxt] != 0:
                nxt += 1
            if nxt >= end:
                _ran_out(columns[i], base + off, end - off + 1, base + end)
            if not plan.dropped[i]:
                out[i] = PyBytes_FromStringAndSize(<const char *> area + off, nxt - off)
            off = nxt + 1
        else:
            col = columns[i]
            raise TupleDecodeError(
                f"column {col.name!r} (attnum {col.attnum}) has impossible attlen {attlen}")
    return out
