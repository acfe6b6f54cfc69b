# cython: language_level=3
"""C types for ``spill.py`` compiled as ``cdclake.decoding._spill`` (Cython's pure-Python
mode): a spill file's entries written into one buffer and read back into Changes at their
slots (``cdclake.native``)."""

import cython

cdef Py_ssize_t ENTRY, HEAD, LOC, TUP, TRUNC, MSG, CHUNK
cdef unsigned int F_CLEAR_TOAST, F_LOCATOR, F_OLD, F_NEW
cdef int TRUNCATE, MESSAGE, TOAST_CHUNK
cdef Py_ssize_t C_ACTION, C_LSN, C_SEQ, C_LOCATOR, C_OLD, C_NEW, C_CLEAR_TOAST, C_ORIGIN
cdef Py_ssize_t C_PAYLOAD, T_INFOMASK2, T_INFOMASK, T_HOFF, T_DATA


cdef Py_ssize_t _tuple_size(t) except -1


@cython.locals(n=Py_ssize_t, action=int)
cpdef Py_ssize_t entry_size(c) except -1


cdef Py_ssize_t _put_tuple(unsigned char *b, Py_ssize_t at, t) except -1


@cython.locals(flags=cython.uint, body=Py_ssize_t, action=int, p=Py_ssize_t)
cdef Py_ssize_t _put_entry(unsigned char *b, Py_ssize_t at, c) except -1


cpdef bytes encode_change(c)


@cython.locals(out=list, i=Py_ssize_t, j=Py_ssize_t, k=Py_ssize_t, total=Py_ssize_t,
               b='unsigned char *', at=Py_ssize_t, n=Py_ssize_t)
cpdef list encode_runs(changes, long long segment_size)


cpdef object new_change(int action, lsn, seq, loc, old, new, bint clear_toast, origin,
                        payload=*)


@cython.locals(n=Py_ssize_t)
cdef object _tuple_at(const unsigned char *d, Py_ssize_t at, Py_ssize_t end)


cdef bytes _span(const unsigned char *d, Py_ssize_t at, Py_ssize_t n, Py_ssize_t end)


@cython.locals(d='const unsigned char *', size=Py_ssize_t, out=list, pos=Py_ssize_t,
               n=Py_ssize_t, end=Py_ssize_t, b=Py_ssize_t, at=Py_ssize_t, action=int,
               flags=cython.uint, spc=cython.uint, db=cython.uint, rel=cython.uint,
               plen=Py_ssize_t, clen=Py_ssize_t, i=Py_ssize_t)
cpdef tuple decode_entries(bytes data, offset, path)
