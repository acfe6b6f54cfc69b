# cython: language_level=3
"""C types for ``test_decoding.py`` compiled as ``cdclake.decoding.plugins._test_decoding``
(Cython's pure-Python mode): its ``begin``, ``commit`` and ``change`` are the compiled
plugin's methods (``cdclake.native``)."""

import cython

from cdclake._identity cimport id

cdef int INSERT, DELETE
cdef int BARE, BIT, BOOL, QUOTED
cdef int _BOOL
cdef frozenset _BARE, _BIT


cdef int style_of(int type_oid) except -1


cdef put_literal(list out, int style, str text)


cdef class Step:
    cdef Py_ssize_t index
    cdef str prefix
    cdef object text
    cdef int style
    cdef bint varlena
    cdef int kind
    cdef object column


cdef class Plan:
    cdef object rel, layout
    cdef list steps


@cython.locals(p=Plan)
cdef Plan plan(self, rel)


@cython.locals(datums=list, step=Step, s=object)
cdef put_tuple(list out, Plan p, tup, bint skip_nulls, toast, lsn)


cdef begin_line(self, txn)


cdef touch(self, txn)


cpdef begin(self, txn)


cpdef commit(self, txn)


@cython.locals(line=list, p=Plan)
cpdef change(self, txn, rel, int action, chg, toast)
