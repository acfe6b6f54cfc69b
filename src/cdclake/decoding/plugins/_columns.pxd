# cython: language_level=3
"""Arrow columns built in place, for the compiled Arrow plugin (``arrow.py`` compiled as
itself, ``_arrow.pxd``): a buffer's int2/int4/int8/float8/timestamp and UTF-8 text columns as
Arrow lays them out, which a well-formed datum is copied into without a Python value."""

cdef class Column:
    cdef readonly object type
    cdef int width
    cdef bint floating
    cdef bytearray data
    cdef Py_ssize_t used
    cdef bytearray offsets
    cdef bytearray bits
    cdef Py_ssize_t n, nulls

    cdef char *_room(self, bytearray buf, Py_ssize_t at, Py_ssize_t k) except NULL
    cdef int _valid(self, bint valid) except -1
    cdef int _end_row(self) except -1
    cdef int add(self, const char *p, Py_ssize_t k) except -1
    cdef int add_int(self, long long v) except -1
    cdef int add_null(self) except -1


cdef int value_kind(object codec) except -1
cdef object new_column(object field, int kind, bint system)
cdef object to_array(object column, object arrow_type)
cdef bint put_datum(object column, int kind, bytes v) except -1
cdef int put_null(object column) except -1
cdef int put_int(object column, long long v) except -1
cdef int put_str(object column, str v) except -1
cdef int drop_rows(object column, Py_ssize_t n) except -1
