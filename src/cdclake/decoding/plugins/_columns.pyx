# cython: language_level=3, boundscheck=False, wraparound=False
"""Arrow columns built in place, for the compiled Arrow plugin (``arrow.py`` compiled as
itself): a buffer's int2, int4, int8, float8 and UTF-8 text columns and its system columns (but
the three nearly always null) are :class:`Column`\ s, Arrow's own buffers (values, offsets,
validity) grown in place, so an int2/int4/int8/float8 datum is copied as it is (PostgreSQL
stores them little-endian, as Arrow does), a UTF-8 text is checked and copied as bytes, and
the system columns are written without a Python int each; the flush (``to_array``) hands the
buffers to Arrow with no conversion. ``pa.array`` over Python values cost 16% of the decode of
a pgbench WAL, and the values themselves about as much.

Not a twin: the Python build keeps lists of Python values (``arrow.py``'s ``put_*``), which
``pa.array`` converts at the flush; what a datum's value is stays the codec's, these take a
well-formed datum of the commonest codecs (int2, int4, int8, UTF-8 text, bool, float8, bytea,
uuid) and leave anything else to it. ``tests/unit/decoding/test_arrow_twins.py`` holds the two
builds to the same rows and errors.
"""

from libc.string cimport memcpy, memset
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8

import pyarrow as pa

from cdclake.tuples._bytes cimport le_int

from cdclake.decoding import stream
from cdclake.tuples import codecs, scalars

# codecs whose values are made here (well-formed datums only): BYTES and UUID are the payload
# bytes themselves (a uuid's 16)
cdef enum:
    NONE, INT2, INT4, INT8, UTF8, BOOL, FLOAT8, BYTES, UUID

#: the payload size a kind takes (0: any)
cdef Py_ssize_t _SIZES[9]
_SIZES[:] = [0, 2, 4, 8, 0, 0, 8, 0, 16]

#: the codecs' value functions whose well-formed datums are made here
cdef dict _KINDS = {scalars.int2_value: INT2, scalars.int4_value: INT4,
                    scalars.int8_value: INT8, scalars.utf8_text: UTF8,
                    scalars.bool_value: BOOL, codecs._f8: FLOAT8, scalars.bytea_value: BYTES,
                    scalars.uuid_value: UUID}

#: the system columns left lists: null in almost every row
cdef frozenset _SPARSE = frozenset((stream.OLD_KEY, stream.UNCHANGED_TOAST, stream.PG_TEXT))


cdef class Column:
    """One column of a buffer as Arrow lays it out: ``width`` bytes a value (2, 4, 8), or
    variable (``width`` 0: int32 offsets and UTF-8 bytes); the validity bitmap is made at the
    first null (most columns have none). The Python reference appends Python values
    (:meth:`append`); the compiled path copies bytes (``add``)."""

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

    cdef char *_room(self, bytearray buf, Py_ssize_t at, Py_ssize_t k) except NULL:
        """``buf``'s bytes from ``at`` on, grown (doubling) to hold ``k`` more."""
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf)
        if at + k > size:
            PyByteArray_Resize(buf, max(2 * size, at + k))
        return PyByteArray_AS_STRING(buf) + at

    cdef int _valid(self, bint valid) except -1:
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

    cdef int _end_row(self) except -1:
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


cdef int value_kind(object codec) except -1:
    """Which of the kinds made here ``codec``'s values are (NONE: the codec makes them)."""
    return _KINDS.get(getattr(codec.value, "__wrapped__", None), NONE)


cdef object new_column(object field, int kind, bint system):
    """A Column for a data column of a kind made here and of its usual type, or a system
    column but the three nearly always null; a list for the others."""
    fits = field.name not in _SPARSE if system else _KIND_TYPES.get(kind) == field.type
    shape = _WIDTHS.get(field.type) if fits else None
    return [] if shape is None else Column(field.type, *shape)


cdef object to_array(object column, object arrow_type):
    if type(column) is Column:
        return (<Column> column).array()
    return pa.array(column, type=arrow_type)


cdef object _value(int kind, bytes v):
    """The typed value of a well-formed datum of codec ``kind``; None for any other, which
    the codec then types (or raises its error for)."""
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(v)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(v)
    cdef long long i
    cdef double d
    if _SIZES[kind] and n != _SIZES[kind]:
        return None
    if kind == UTF8:
        try:
            return PyUnicode_DecodeUTF8(<const char *> b, n, NULL)  # strict, as str(p, "utf-8")
        except UnicodeDecodeError:
            return None
    if kind == BYTES or kind == UUID:
        return v
    if kind == BOOL:
        return (b[0] != 0) if n else None
    if kind == FLOAT8:
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


cdef inline bint _add(int kind, Column col, bytes v) except -1:
    """Put a well-formed datum of codec ``kind`` into its Column; False for any other."""
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(v)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(v)
    cdef long long i
    cdef double d
    if kind == UTF8:
        if not _utf8(b, n):
            return False
        col.add(<const char *> b, n)
        return True
    if n != _SIZES[kind]:
        return False
    if kind == FLOAT8:
        i = le_int(b, 8)
        memcpy(&d, &i, 8)
        col.add(<const char *> &d, 8)
    else:
        col.add_int(le_int(b, <int> n))
    return True


cdef bint put_datum(object column, int kind, bytes v) except -1:
    """Append the value of a well-formed datum of ``kind``; False (nothing appended) for any
    other, which the codec then types or raises its error for."""
    if type(column) is Column:
        return _add(kind, <Column> column, v)
    x = _value(kind, v)
    if x is None:
        return False
    column.append(x)
    return True


cdef int put_null(object column) except -1:
    if type(column) is Column:
        return (<Column> column).add_null()
    (<list> column).append(None)
    return 0


cdef int put_int(object column, long long v) except -1:
    if type(column) is Column:
        return (<Column> column).add_int(v)
    (<list> column).append(v)
    return 0


cdef int put_str(object column, str v) except -1:
    cdef Py_ssize_t n
    cdef const char *p
    if type(column) is Column:
        p = PyUnicode_AsUTF8AndSize(v, &n)
        return (<Column> column).add(p, n)
    (<list> column).append(v)
    return 0


cdef int drop_rows(object column, Py_ssize_t n) except -1:
    """Drop the rows from ``n`` on (a row begun and not ended: an error in one of its
    values)."""
    if type(column) is Column:
        (<Column> column).truncate(n)
    else:
        del (<list> column)[n:]
    return 0
