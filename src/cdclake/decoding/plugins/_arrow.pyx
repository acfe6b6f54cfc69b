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

The row goes into the buffer's columns, which this module's ``new_columns`` makes
:class:`Column`s where it can: Arrow's own buffers (values, offsets, validity), grown in place,
so an int2/int4/int8/float8 datum is copied as it is (PostgreSQL stores them little-endian, as
Arrow does), a UTF-8 text is checked and copied as bytes, and the system columns are written
without a Python int each; the flush (``column_array``) hands the buffers to Arrow with no
conversion. ``pa.array`` over Python values cost 16% of the decode of a pgbench WAL, and the
values themselves about as much.
"""

from libc.string cimport memcpy, memset
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromVoidPtr
from cpython.unicode cimport PyUnicode_DecodeUTF8

import pyarrow as pa

from cdclake.decoding.plugins._plans cimport cached_steps, keep_steps
from cdclake.tuples._bytes cimport le_int, plain_payload
from cdclake.decoding._changes cimport ChangeSlots, change_slots
from cdclake.wal._slots cimport get, offset, put

from cdclake.decoding import stream
from cdclake.decoding.changes import DELETE, INSERT, Change, TxnInfo
from cdclake.decoding.plugins.arrow import _TableBuffer
from cdclake.decoding.rows import UNCHANGED_TOAST, column_payload, exact_text
from cdclake.tuples import codecs, scalars
from cdclake.tuples.heap import MissingValue
from cdclake.tuples.untypeable import NotTypeable
from cdclake.wal.record import WalTuple

# codecs whose values are made here (well-formed datums only)
cdef enum Kind:
    NONE, INT2, INT4, INT8, UTF8, BOOL, FLOAT8, SAME

cdef int _INSERT = INSERT
cdef int _DELETE = DELETE
cdef str _OP_INSERT = stream.OP_INSERT
cdef str _OP_UPDATE = stream.OP_UPDATE
cdef str _OP_DELETE = stream.OP_DELETE
cdef dict _OPS = {_OP_INSERT: _OP_INSERT.encode(), _OP_UPDATE: _OP_UPDATE.encode(),
                  _OP_DELETE: _OP_DELETE.encode()}
cdef object _PG_EPOCH_US = stream.PG_EPOCH_US
# the fields read per change, at their slots (a lookup through the type otherwise)
cdef ChangeSlots CS = change_slots(Change, WalTuple)
cdef Py_ssize_t I_XID = offset(TxnInfo, "xid")
cdef Py_ssize_t I_FINAL_LSN = offset(TxnInfo, "final_lsn")
cdef Py_ssize_t I_COMMIT_TIME = offset(TxnInfo, "commit_time")
cdef Py_ssize_t B_REL = offset(_TableBuffer, "rel")
cdef Py_ssize_t B_LAYOUT = offset(_TableBuffer, "layout")
cdef Py_ssize_t B_COLUMNS = offset(_TableBuffer, "columns")
cdef Py_ssize_t B_ROWS = offset(_TableBuffer, "rows")
cdef Py_ssize_t B_PENDING = offset(_TableBuffer, "pending_bytes")
#: the system columns left lists: null in almost every row
cdef frozenset _SPARSE = frozenset((stream.OLD_KEY, stream.UNCHANGED_TOAST, stream.PG_TEXT))

#: the codecs' value functions whose well-formed datums ``_value`` makes itself; SAME: the
#: value is the payload bytes (bytea, and uuid of 16 bytes)
cdef dict _KINDS = {scalars.int2_value: INT2, scalars.int4_value: INT4,
                    scalars.int8_value: INT8, scalars.utf8_text: UTF8,
                    scalars.bool_value: BOOL, codecs._f8: FLOAT8, scalars.bytea_value: SAME,
                    scalars.uuid_value: SAME}


cdef class Column:
    """One column of a buffer as Arrow lays it out: ``width`` bytes a value (2, 4, 8), or
    variable (``width`` 0: int32 offsets and UTF-8 bytes); the validity bitmap is made at the
    first null (most columns have none). The Python reference appends Python values
    (:meth:`append`); the compiled path copies bytes (``add``)."""
    cdef readonly object type
    cdef int width
    cdef bint floating
    cdef bytearray data
    cdef Py_ssize_t used  # bytes of ``data`` that hold values
    cdef bytearray offsets  # width 0: n + 1 int32 offsets into data
    cdef bytearray bits  # None until the first null
    cdef Py_ssize_t n, nulls

    def __cinit__(self, type, int width, bint floating=False):
        self.type = type
        self.width = width
        self.floating = floating
        self.data = bytearray(1024)
        self.used = 0
        self.offsets = bytearray(4 * 256) if width == 0 else None
        self.bits = None
        self.n = 0
        self.nulls = 0

    def __len__(self):
        return self.n

    cdef inline char *_room(self, bytearray buf, Py_ssize_t at, Py_ssize_t k) except NULL:
        """``buf``'s bytes from ``at`` on, grown (doubling) to hold ``k`` more."""
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
        if at + k > size:
            PyByteArray_Resize(buf, max(2 * size, at + k))
        return PyByteArray_AS_STRING(buf) + at

    cdef inline int _valid(self, bint valid) except -1:
        """Row ``n``'s validity bit (the bitmap made at the first null)."""
        cdef unsigned char *b
        cdef Py_ssize_t i
        if self.bits is None:
            if valid:
                return 0
            self.bits = bytearray(max(256, (self.n >> 3) + 1))
            b = <unsigned char *> PyByteArray_AS_STRING(self.bits)
            memset(b, 0xFF, self.n >> 3)
            for i in range(self.n & ~7, self.n):
                b[i >> 3] |= 1 << (i & 7)
        b = <unsigned char *> self._room(self.bits, self.n >> 3, 1)
        if valid:
            b[0] |= 1 << (self.n & 7)
        else:  # a new byte, or one a truncated row left its bit in
            b[0] &= ~(1 << (self.n & 7))
        return 0

    cdef inline int _end_row(self) except -1:
        cdef int end
        if self.width == 0:
            end = <int> self.used
            memcpy(self._room(self.offsets, 4 * (self.n + 1), 4), &end, 4)
        self.n += 1
        return 0

    cdef int add(self, const char *p, Py_ssize_t k) except -1:
        """A value: ``k`` bytes at ``p`` (``width`` of them, or UTF-8 already checked)."""
        memcpy(self._room(self.data, self.used, k), p, k)
        self.used += k
        self._valid(True)
        return self._end_row()

    cdef int add_int(self, long long v) except -1:
        """An integer value of a fixed-width column (little-endian, as this machine's)."""
        memcpy(self._room(self.data, self.used, self.width), &v, self.width)
        self.used += self.width
        self._valid(True)
        return self._end_row()

    cdef int add_null(self) except -1:
        if self.width:
            memset(self._room(self.data, self.used, self.width), 0, self.width)
            self.used += self.width
        self._valid(False)
        self.nulls += 1
        return self._end_row()

    def append(self, v):
        """A Python value, as ``pa.array`` would take it for this column's type."""
        cdef double d
        cdef long long i, bound
        if v is None:
            self.add_null()
        elif self.width == 0:
            b = v.encode() if isinstance(v, str) else bytes(v)
            self.add(PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))
        elif self.floating:
            d = v
            self.add(<const char *> &d, 8)
        else:
            i = v
            bound = (<long long> 1) << (8 * self.width - 1)
            if self.width < 8 and not -bound <= i < bound:
                raise OverflowError(f"{v} does not fit {self.type}")
            self.add_int(i)

    def array(self):
        """The column as an Arrow array, over its buffers (no copy)."""
        validity = pa.py_buffer(self.bits) if self.nulls else None
        data = pa.py_buffer(self.data)
        if self.width:
            return pa.Array.from_buffers(self.type, self.n, [validity, data], self.nulls)
        return pa.Array.from_buffers(self.type, self.n, [validity, pa.py_buffer(self.offsets),
                                                          data], self.nulls)

    def truncate(self, Py_ssize_t n):
        """Drop the rows from ``n`` on (a row the compiled path began and could not end)."""
        cdef const unsigned char *b
        cdef int end
        cdef Py_ssize_t i
        if n >= self.n:
            return
        if self.bits is not None:
            b = <const unsigned char *> PyByteArray_AS_STRING(self.bits)
            for i in range(n, self.n):
                if not (b[i >> 3] >> (i & 7)) & 1:
                    self.nulls -= 1
        if self.width:
            self.used = n * self.width
        else:
            memcpy(&end, PyByteArray_AS_STRING(self.offsets) + 4 * n, 4)
            self.used = end
        self.n = n


#: the Arrow types built as Columns: width, floating
cdef dict _WIDTHS = {pa.int16(): (2, False), pa.int32(): (4, False), pa.int64(): (8, False),
                     pa.float64(): (8, True), pa.timestamp("us", tz="UTC"): (8, False),
                     pa.string(): (0, False)}
#: the Arrow type a data column of each kind made here must have to be a Column
cdef dict _KIND_TYPES = {INT2: pa.int16(), INT4: pa.int32(), INT8: pa.int64(),
                         FLOAT8: pa.float64(), UTF8: pa.string()}


def new_columns(layout, schema):
    """See ``arrow.new_columns``: Columns for the values this module makes (int2, int4,
    int8, float8 and UTF-8 text columns of their usual types) and for the system columns but
    the old key, the unchanged TOAST columns and the texts (None in almost every row), lists
    for the others."""
    cdef list out = []
    cdef _Step step
    steps = _steps(layout)
    live = len(steps)
    for i, f in enumerate(schema):
        if i < live:
            step = steps[i]
            fits = _KIND_TYPES.get(step.kind) == f.type
        else:
            fits = f.name not in _SPARSE
        shape = _WIDTHS.get(f.type) if fits else None
        out.append([] if shape is None else Column(f.type, *shape))
    return out


def column_array(column, arrow_type):
    """See ``arrow.column_array``."""
    if type(column) is Column:
        return (<Column> column).array()
    return pa.array(column, type=arrow_type)


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


cdef inline bint _utf8(const unsigned char *b, Py_ssize_t n) except -1:
    """Whether ``n`` bytes at ``b`` are UTF-8 as ``str(p, "utf-8")`` takes it (ASCII at a
    glance, anything else decoded)."""
    cdef Py_ssize_t i
    for i in range(n):
        if b[i] & 0x80:
            try:
                PyUnicode_DecodeUTF8(<const char *> b, n, NULL)
            except UnicodeDecodeError:
                return False
            return True
    return True


cdef inline bint _add(_Step step, Column col, bytes v) except -1:
    """Put a well-formed datum of ``step``'s kind into its Column; False for any other."""
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(v)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(v)
    cdef long long i
    cdef double d
    if step.kind == UTF8:
        if not _utf8(b, n):
            return False
        col.add(<const char *> b, n)
        return True
    if n != step.size:
        return False
    if step.kind == FLOAT8:
        i = le_int(b, 8)
        memcpy(&d, &i, 8)
        col.add(<const char *> &d, 8)
    else:
        col.add_int(le_int(b, <int> n))
    return True


cdef inline int _null(c) except -1:
    if type(c) is Column:
        return (<Column> c).add_null()
    (<list> c).append(None)
    return 0


cdef inline int _int(c, long long v) except -1:
    if type(c) is Column:
        return (<Column> c).add_int(v)
    (<list> c).append(v)
    return 0


cdef object _row(list cols, layout, tup, lsn, toast, list unchanged):
    """See ``ArrowRows._values``: the values go into ``cols`` (a row's first columns) as they
    are made; returns the texts."""
    cdef list datums = layout.datums(tup, lsn)
    cdef dict texts = None
    cdef _Step step
    cdef Py_ssize_t i = 0
    for step in _steps(layout):
        c = cols[i]
        i += 1
        d = datums[step.index]
        if d is None:
            _null(c)
            continue
        if step.varlena:
            v = plain_payload(d)
            if v is None:
                v = column_payload(step.column, d, toast)
                if v is UNCHANGED_TOAST:
                    unchanged.append(step.column.column.name)
                    _null(c)
                    continue
        else:
            v = d
        if step.kind != NONE and type(v) is bytes:
            if type(c) is Column and _add(step, <Column> c, <bytes> v):
                continue
            x = _value(step, <bytes> v)
            if x is not None:
                c.append(x)
                continue
        try:
            if isinstance(v, MissingValue):
                x = step.codec.value_from_text(v.text)
            else:
                x = step.codec.value(v)
        except NotTypeable:
            x = None
            if texts is None:
                texts = {}
            texts[str(step.column.column.attnum)] = exact_text(step.column, v)
        c.append(x)
    return texts


cdef _append(list cols, txn, lsn, seq, str op, unchanged, texts, Py_ssize_t n):
    """See ``ArrowRows._append`` (but the counts and the flush), for a row without an old key
    whose ``n`` values are in: the system columns."""
    if type(txn) is TxnInfo:
        _int(cols[n], get(txn, I_FINAL_LSN))
        _int(cols[n + 1], get(txn, I_COMMIT_TIME) + _PG_EPOCH_US)
        _int(cols[n + 2], get(txn, I_XID))
    else:
        _int(cols[n], txn.final_lsn)
        _int(cols[n + 1], txn.commit_time + _PG_EPOCH_US)
        _int(cols[n + 2], txn.xid)
    _int(cols[n + 3], lsn)
    _int(cols[n + 4], seq)
    c = cols[n + 5]
    if type(c) is Column:
        (<Column> c).add(PyBytes_AS_STRING(_OPS[op]), 1)
    else:
        c.append(op)
    (<list> cols[n + 6]).append(None)
    (<list> cols[n + 7]).append(unchanged)
    (<list> cols[n + 8]).append(texts)


cdef void _undo(list cols, Py_ssize_t rows):
    """Drop a row begun and not ended (an error in one of its values) from every column."""
    for c in cols:
        if type(c) is Column:
            (<Column> c).truncate(rows)
        else:
            del (<list> c)[rows:]


def change(self, txn, rel, int action, change, toast):
    """See ``ArrowRows.change``."""
    if type(change) is not Change:
        return self._python_change(txn, rel, action, change, toast)
    new = get(change, CS.new)
    if get(change, CS.old) is not None or new is None:
        return self._python_change(txn, rel, action, change, toast)
    buf = self._buffers.get(PyLong_FromVoidPtr(<void *> rel))
    if buf is None or get(buf, B_REL) is not rel:
        buf = self._buffer(rel)
    cdef list unchanged = []
    cdef list cols = get(buf, B_COLUMNS)
    cdef Py_ssize_t rows = len(cols[0])
    layout = get(buf, B_LAYOUT)
    lsn = get(change, CS.lsn)
    op = _OP_INSERT if action == _INSERT else _OP_DELETE if action == _DELETE else _OP_UPDATE
    size = len(new.data)
    if toast:
        for chunks in toast.values():
            for c in chunks:
                size += len(c)
    try:
        texts = _row(cols, layout, new, lsn, toast, unchanged)
        _append(cols, txn, lsn, get(change, CS.seq), op, unchanged or None, texts,
                len(layout.live))
    except BaseException:
        _undo(cols, rows)
        raise
    put(buf, B_ROWS, get(buf, B_ROWS) + 1)
    pending = get(buf, B_PENDING) + size
    put(buf, B_PENDING, pending)
    if rows + 1 >= self.rows_per_part or pending >= self.bytes_per_part:
        self._flush(buf)
