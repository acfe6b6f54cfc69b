# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of ``TestDecoding.change``, ``TestDecoding._tuple``, ``TestDecoding.begin``
and ``TestDecoding.commit`` (:mod:`cdclake.decoding.plugins.test_decoding`, see
:mod:`cdclake.native`): one change's line as test_decoding prints it, and the transaction's
framing, which runs as often as a change in a workload of small transactions.

The same lines and errors as the Python reference, which tests run beside it. Its plan per
relation version keeps each column's text function and quoting style (bare, bit string, bool,
quoted) apart, so a value costs one call into its codec and no call for the quoting; the
commonest codecs (int2, int4, int8 and UTF-8 text) cost no call at all: their well-formed
datums are formatted here, anything else goes to the codec, which says what is wrong.
"""

import sys

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromVoidPtr
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8, PyUnicode_FindChar

from cdclake.decoding.plugins._plans cimport cached_steps, keep_steps
from cdclake.tuples._bytes cimport decimal, plain_payload

from cdclake.decoding.changes import DELETE, INSERT
from cdclake.decoding.rows import UNCHANGED_TOAST, LayoutCache, RowLayout, column_payload
from cdclake.tuples import codecs, floats, heap, scalars
from cdclake.tuples.codecs import FORMAT_ERRORS
from cdclake.tuples.heap import MissingValue

# test_decoding's literal styles (print_literal)
cdef enum Style:
    BARE, BIT, BOOL, QUOTED

# codecs formatted inline (well-formed datums only)
cdef enum Inline:
    NONE, INT2, INT4, INT8, UTF8, BOOL_, UUID, BYTEA, FLOAT8

cdef int _INSERT = INSERT
cdef int _DELETE = DELETE

cdef frozenset _BARE = frozenset({21, 23, 20, 26, 700, 701, 1700})
cdef frozenset _BIT = frozenset({1560, 1562})


cdef class _Step:
    cdef Py_ssize_t index
    cdef str prefix
    cdef object text
    cdef Style style
    cdef Inline inline
    cdef bint varlena
    cdef object column  #: the LiveColumn


cdef dict _plans = {}

#: the codec text functions whose well-formed datums ``_inline_text`` formats itself
cdef dict _INLINE = {scalars.int2_text: INT2, scalars.int4_text: INT4,
                     scalars.int8_text: INT8, scalars.utf8_text: UTF8,
                     scalars.bool_text: BOOL_, scalars.uuid_text: UUID,
                     scalars.bytea_text: BYTEA, codecs._float8_text: FLOAT8}


cdef list _steps(layout):
    cdef list steps = cached_steps(_plans, layout)
    if steps is not None:
        return steps
    steps = []
    for lc in layout.live:
        s = _Step()
        s.index = lc.index
        s.prefix = f" {lc.column.quoted}[{lc.codec.type_name}]:"
        s.text = getattr(lc.codec.text, "__wrapped__", lc.codec.text)
        oid = lc.column.type_oid
        s.style = BARE if oid in _BARE else BIT if oid in _BIT else BOOL if oid == 16 else QUOTED
        s.varlena = lc.codec.typisvarlena
        s.inline = _INLINE.get(s.text, NONE)
        s.column = lc
        steps.append(s)
    return keep_steps(_plans, layout, steps)


cdef inline int _quoted(list out, Style style, str text) except -1:
    """Append ``text`` as test_decoding's literal of ``style``: pieces, joined once per
    line, rather than a new string per quote; a text without a quote in it as it is (looked
    for in C: ``str.replace`` is a method call, for nothing, on almost every value)."""
    if style == BARE:
        out.append(text)
    elif style == QUOTED:
        out.append("'")
        if PyUnicode_FindChar(text, "'", 0, len(text), 1) < 0:
            out.append(text)
        else:
            out.append(text.replace("'", "''"))
        out.append("'")
    elif style == BIT:
        out.append("B'")
        out.append(text)
        out.append("'")
    else:
        out.append("true" if text == "t" else "false")
    return 0


cdef inline object _inline_text(Inline kind, object value):
    """The text of a well-formed int2/int4/int8/UTF-8/bool/uuid/bytea/float8 datum in
    ``bytes``; None otherwise (the codec then formats it, or raises its error)."""
    if type(value) is not bytes:
        return None
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(value)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(value)
    cdef long long v
    cdef char digits[20]
    if kind == UTF8:
        return PyUnicode_DecodeUTF8(<const char *> b, n, NULL)  # strict, as str(p, "utf-8")
    if kind == BYTEA:
        return "\\x" + (<bytes> value).hex()
    if kind == FLOAT8:
        return floats.float8_datum_text(value)  # the twin bound now
    if kind == BOOL_:
        return ("t" if b[0] else "f") if n else None
    if kind == UUID:
        if n != 16:
            return None
        h = (<bytes> value).hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if kind == INT4 and n == 4:
        v = <int> (b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24))
    elif kind == INT8 and n == 8:
        v = <long long> (
            (b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned long long> b[3] << 24))
            | ((<unsigned long long> (b[4] | (b[5] << 8) | (b[6] << 16)
                                      | (<unsigned int> b[7] << 24))) << 32))
    elif kind == INT2 and n == 2:
        v = <short> (b[0] | (b[1] << 8))
    else:
        return None
    return PyUnicode_DecodeASCII(digits, decimal(digits, v), NULL)


cdef int _text(list out, _Step step, object value) except -1:
    """Append ``step``'s quoted literal of ``value`` (its payload bytes)."""
    cdef object text = None
    if step.inline != NONE:
        text = _inline_text(step.inline, value)
    if text is None:
        text = step.text(value)
    _quoted(out, step.style, text)
    return 0


cdef list _datums(layout, tup, lsn):
    """``layout.datums(tup, lsn)``, inline for a RowLayout whose columns cover the tuple (the
    method raises the error for one that does not)."""
    if type(layout) is not RowLayout or (tup.infomask2 & 0x07FF) > layout.ncolumns:
        return layout.datums(tup, lsn)
    return heap.deform(tup, layout.rel.columns)


cdef object _layout(layouts, rel):
    """``layouts.get(rel)``, inline when the LayoutCache holds it already."""
    if type(layouts) is LayoutCache:
        layout = layouts._cache.get(PyLong_FromVoidPtr(<void *> rel))
        if layout is not None and layout.rel is rel:
            return layout
    return layouts.get(rel)


cdef int _tuple_text(list parts, layout, tup, bint skip_nulls, toast, lsn) except -1:
    """Append the pieces of ``tup``'s columns to ``parts``."""
    cdef list datums = _datums(layout, tup, lsn)
    cdef _Step step = None
    value = None
    try:
        for step in _steps(layout):
            value = datums[step.index]
            if value is None:
                if not skip_nulls:
                    parts.append(step.prefix)
                    parts.append("null")
            elif type(value) is MissingValue:
                literal = sys.modules["cdclake.decoding.plugins.test_decoding"].literal
                parts.append(step.prefix)
                parts.append(literal(step.column.column.type_oid, value.text))
            elif step.varlena:
                plain = plain_payload(value)
                value = column_payload(step.column, value, toast) if plain is None else plain
                parts.append(step.prefix)
                if value is UNCHANGED_TOAST:
                    parts.append("unchanged-toast-datum")
                else:
                    _text(parts, step, value)
            else:
                parts.append(step.prefix)
                _text(parts, step, value)
    except FORMAT_ERRORS:
        step.column.codec.text(value)  # raises the codec's TupleDecodeError naming type, column
        raise
    return 0


def _tuple(self, layout, tup, bint skip_nulls, toast, lsn):
    """See ``TestDecoding._tuple``."""
    cdef list parts = []
    _tuple_text(parts, layout, tup, skip_nulls, toast, lsn)
    return "".join(parts)


cdef _begin_line(self, txn):
    """See ``TestDecoding._begin_line``."""
    self.write_begin(f"BEGIN {txn.xid}" if self.include_xids else "BEGIN")


def begin(self, txn):
    """See ``TestDecoding.begin``."""
    self._wrote = False
    if not self.skip_empty_xacts:
        _begin_line(self, txn)


def commit(self, txn):
    """See ``TestDecoding.commit``."""
    if self.skip_empty_xacts and not self._wrote:
        return
    self.write(f"COMMIT {txn.xid}" if self.include_xids else "COMMIT")


def change(self, txn, rel, int action, change, toast):
    """See ``TestDecoding.change``."""
    if self.skip_empty_xacts and not self._wrote:
        _begin_line(self, txn)
    self._wrote = True
    layout = _layout(self.layouts, rel)
    cdef list line = ["table ", rel.qualified, ":"]
    if action == _INSERT:
        line.append(" INSERT:")
        new = change.new
        if new is None:
            line.append(" (no-tuple-data)")
        else:
            _tuple_text(line, layout, new, False, toast, change.lsn)
    elif action == _DELETE:
        line.append(" DELETE:")
        old = change.old
        if old is None:
            line.append(" (no-tuple-data)")
        else:
            _tuple_text(line, layout, old, True, {}, change.lsn)
    else:
        line.append(" UPDATE:")
        old, new = change.old, change.new
        if old is not None:
            line.append(" old-key:")
            _tuple_text(line, layout, old, True, {}, change.lsn)
            line.append(" new-tuple:")
        if new is None:
            line.append(" (no-tuple-data)")
        else:
            _tuple_text(line, layout, new, False, toast, change.lsn)
    self.write("".join(line))
