# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``ArrowRows.change`` (:mod:`cdclake.decoding.plugins.arrow`, see
:mod:`cdclake.native`): one change's typed row appended to its relation version's buffer.

It is what the Spark decode and the lake's local decode spend most on per change: a profile of
a pgbench WAL (280,000 changes) gave the Python plugin 7.4 s of a 9.0 s decode, in Python
frames per value (``column_payload``, the codec's guard, ``int4_value``) and per row
(``_values``, ``_append``). Here a change with a new tuple and no old key (every INSERT, an
UPDATE that logged no old key) is typed and appended in one call; the commonest codecs (int2,
int4, int8, UTF-8 text, bool, float8, bytea, uuid) cost no call for a well-formed datum, any
other datum goes to its codec, which gives the value or says what is wrong. Every other change
goes to the Python reference, and tests run the two side by side.
"""

from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromVoidPtr
from cpython.unicode cimport PyUnicode_DecodeUTF8

from cdclake.decoding.plugins._plans cimport cached_steps, keep_steps
from cdclake.tuples._bytes cimport le_int, plain_payload

from cdclake.decoding import stream
from cdclake.decoding.changes import DELETE, INSERT
from cdclake.decoding.rows import UNCHANGED_TOAST, column_payload, exact_text
from cdclake.tuples import codecs, scalars
from cdclake.tuples.heap import MissingValue
from cdclake.tuples.untypeable import NotTypeable

# codecs whose values are made here (well-formed datums only)
cdef enum Kind:
    NONE, INT2, INT4, INT8, UTF8, BOOL, FLOAT8, SAME

cdef int _INSERT = INSERT
cdef int _DELETE = DELETE
cdef str _OP_INSERT = stream.OP_INSERT
cdef str _OP_UPDATE = stream.OP_UPDATE
cdef str _OP_DELETE = stream.OP_DELETE
cdef object _PG_EPOCH_US = stream.PG_EPOCH_US

#: the codecs' value functions whose well-formed datums ``_value`` makes itself; SAME: the
#: value is the payload bytes (bytea, and uuid of 16 bytes)
cdef dict _KINDS = {scalars.int2_value: INT2, scalars.int4_value: INT4,
                    scalars.int8_value: INT8, scalars.utf8_text: UTF8,
                    scalars.bool_value: BOOL, codecs._f8: FLOAT8, scalars.bytea_value: SAME,
                    scalars.uuid_value: SAME}


cdef class _Step:
    cdef Py_ssize_t index
    cdef bint varlena
    cdef Kind kind
    cdef Py_ssize_t size  #: the payload size the kind needs (0: any)
    cdef object column  #: the LiveColumn
    cdef object codec


cdef dict _plans = {}


cdef list _steps(layout):
    cdef list steps = cached_steps(_plans, layout)
    if steps is not None:
        return steps
    steps = []
    for lc in layout.live:
        s = _Step()
        s.index = lc.index
        s.varlena = lc.codec.typisvarlena
        fn = getattr(lc.codec.value, "__wrapped__", None)
        s.kind = _KINDS.get(fn, NONE)
        s.size = {INT2: 2, INT4: 4, INT8: 8, FLOAT8: 8}.get(
            s.kind, 16 if fn is scalars.uuid_value else 0)
        s.column = lc
        s.codec = lc.codec
        steps.append(s)
    return keep_steps(_plans, layout, steps)


cdef object _value(_Step step, bytes v):
    """The typed value of a well-formed datum of ``step``'s kind; None for any other, which
    the codec then types (or raises its error for)."""
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(v)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(v)
    cdef long long i
    cdef double d
    if step.size and n != step.size:
        return None
    if step.kind == UTF8:
        try:
            return PyUnicode_DecodeUTF8(<const char *> b, n, NULL)  # strict, as str(p, "utf-8")
        except UnicodeDecodeError:
            return None
    if step.kind == SAME:
        return v
    if step.kind == BOOL:
        return (b[0] != 0) if n else None
    if step.kind == FLOAT8:
        i = le_int(b, 8)
        memcpy(&d, &i, 8)
        return d
    return le_int(b, <int> n)  # INT2, INT4, INT8 of their size


cdef tuple _values(layout, tup, lsn, toast, list unchanged):
    """See ``ArrowRows._values``."""
    cdef list datums = layout.datums(tup, lsn)
    cdef list out = []
    cdef dict texts = None
    cdef _Step step
    for step in _steps(layout):
        d = datums[step.index]
        if d is None:
            out.append(None)
            continue
        if step.varlena:
            v = plain_payload(d)
            if v is None:
                v = column_payload(step.column, d, toast)
                if v is UNCHANGED_TOAST:
                    unchanged.append(step.column.column.name)
                    out.append(None)
                    continue
        else:
            v = d
        if step.kind != NONE and type(v) is bytes:
            x = _value(step, <bytes> v)
            if x is not None:
                out.append(x)
                continue
        try:
            if isinstance(v, MissingValue):
                out.append(step.codec.value_from_text(v.text))
            else:
                out.append(step.codec.value(v))
        except NotTypeable:
            out.append(None)
            if texts is None:
                texts = {}
            texts[str(step.column.column.attnum)] = exact_text(step.column, v)
    return out, texts


cdef _append(self, buf, txn, lsn, seq, str op, list values, unchanged, texts, size):
    """See ``ArrowRows._append``, for a row without an old key."""
    cdef list cols = buf.columns
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t i
    for i in range(n):
        (<list> cols[i]).append(values[i])
    (<list> cols[n]).append(txn.final_lsn)
    (<list> cols[n + 1]).append(txn.commit_time + _PG_EPOCH_US)
    (<list> cols[n + 2]).append(txn.xid)
    (<list> cols[n + 3]).append(lsn)
    (<list> cols[n + 4]).append(seq)
    (<list> cols[n + 5]).append(op)
    (<list> cols[n + 6]).append(None)
    (<list> cols[n + 7]).append(unchanged)
    (<list> cols[n + 8]).append(texts)
    buf.rows += 1
    buf.pending_bytes += size
    if len(<list> cols[0]) >= self.rows_per_part or buf.pending_bytes >= self.bytes_per_part:
        self._flush(buf)


def change(self, txn, rel, int action, change, toast):
    """See ``ArrowRows.change``."""
    new = change.new
    if change.old is not None or new is None:
        return self._python_change(txn, rel, action, change, toast)
    buf = self._buffers.get(PyLong_FromVoidPtr(<void *> rel))
    if buf is None or buf.rel is not rel:
        buf = self._buffer(rel)
    cdef list unchanged = []
    values, texts = _values(buf.layout, new, change.lsn, toast, unchanged)
    op = _OP_INSERT if action == _INSERT else _OP_DELETE if action == _DELETE else _OP_UPDATE
    size = len(new.data)
    if toast:
        for chunks in toast.values():
            for c in chunks:
                size += len(c)
    _append(self, buf, txn, change.lsn, change.seq, op, values, unchanged or None, texts, size)
