# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``TestDecoding._tuple`` (:mod:`cdclake.decoding.plugins.test_decoding`,
see :mod:`cdclake.native`): one change's columns as test_decoding prints them.

The same lines and errors as the Python reference, which tests run beside it. Its plan per
relation version keeps each column's text function and quoting style (bare, bit string, bool,
quoted) apart, so a value costs one call into its codec and no call for the quoting.
"""

import sys

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

from cdclake.decoding.rows import UNCHANGED_TOAST, column_payload
from cdclake.tuples.codecs import FORMAT_ERRORS
from cdclake.tuples.heap import MissingValue

# test_decoding's literal styles (print_literal)
cdef enum Style:
    BARE, BIT, BOOL, QUOTED

cdef frozenset _BARE = frozenset({21, 23, 20, 26, 700, 701, 1700})
cdef frozenset _BIT = frozenset({1560, 1562})


cdef class _Step:
    cdef Py_ssize_t index
    cdef str prefix
    cdef object text
    cdef Style style
    cdef bint varlena
    cdef object column  #: the LiveColumn


cdef class _Plan:
    cdef object layout  #: kept so the cache key (its id) stays valid
    cdef list steps


cdef dict _plans = {}


cdef _Plan _plan(layout):
    plan = _plans.get(id(layout))
    if plan is not None and (<_Plan> plan).layout is layout:
        return <_Plan> plan
    if len(_plans) > 4096:
        _plans.clear()
    p = _Plan()
    p.layout = layout
    p.steps = []
    for lc in layout.live:
        s = _Step()
        s.index = lc.index
        s.prefix = f" {lc.column.quoted}[{lc.codec.type_name}]:"
        s.text = getattr(lc.codec.text, "__wrapped__", lc.codec.text)
        oid = lc.column.type_oid
        s.style = BARE if oid in _BARE else BIT if oid in _BIT else BOOL if oid == 16 else QUOTED
        s.varlena = lc.codec.typisvarlena
        s.column = lc
        p.steps.append(s)
    _plans[id(layout)] = p
    return p


cdef inline object _plain_payload(object raw):
    """The value bytes of an inline, uncompressed varlena held in ``bytes`` (the common case);
    None for anything else (compressed, external, malformed), which ``column_payload``
    handles with its checks and errors."""
    if type(raw) is not bytes:
        return None
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef unsigned int size
    if n == 0:
        return None
    if b[0] & 1:
        if b[0] != 1 and (b[0] >> 1) == n:
            return PyBytes_FromStringAndSize(<const char *> b + 1, n - 1)
        return None
    if n < 4 or b[0] & 2:
        return None
    size = (b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)) >> 2
    if size != n:
        return None
    return PyBytes_FromStringAndSize(<const char *> b + 4, n - 4)


cdef inline str _quoted(Style style, str text):
    if style == BARE:
        return text
    if style == QUOTED:
        return "'" + text.replace("'", "''") + "'"
    if style == BIT:
        return "B'" + text + "'"
    return "true" if text == "t" else "false"


def _tuple(self, layout, tup, bint skip_nulls, toast, lsn):
    """See ``TestDecoding._tuple``."""
    cdef list datums = layout.datums(tup, lsn)
    cdef list parts = []
    cdef _Plan plan = _plan(layout)
    cdef _Step step = None
    value = None
    try:
        for step in plan.steps:
            value = datums[step.index]
            if value is None:
                if not skip_nulls:
                    parts.append(step.prefix + "null")
            elif type(value) is MissingValue:
                literal = sys.modules["cdclake.decoding.plugins.test_decoding"].literal
                parts.append(step.prefix + literal(step.column.column.type_oid, value.text))
            elif step.varlena:
                plain = _plain_payload(value)
                value = column_payload(step.column, value, toast) if plain is None else plain
                if value is UNCHANGED_TOAST:
                    parts.append(step.prefix + "unchanged-toast-datum")
                else:
                    parts.append(step.prefix + _quoted(step.style, step.text(value)))
            else:
                parts.append(step.prefix + _quoted(step.style, step.text(value)))
    except FORMAT_ERRORS:
        step.column.codec.text(value)  # raises the codec's TupleDecodeError naming type, column
        raise
    return "".join(parts)
