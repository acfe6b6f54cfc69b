# cython: language_level=3
"""C types for ``arrow.py`` compiled as ``cdclake.decoding.plugins._arrow`` (Cython's
pure-Python mode): its ``change``, ``rewrite``, ``truncate``, ``buffer_of`` and ``flush`` are
the compiled plugin's methods (``cdclake.native``), its buffers and steps extension types with
C fields."""

import cython

from cdclake._identity cimport id

cdef int INSERT, DELETE
cdef str OP_INSERT, OP_UPDATE, OP_DELETE, OP_TRUNCATE, OP_REWRITE_BEGIN, OP_REWRITE, PG_TEXT
cdef long long PG_EPOCH_US
cdef Py_ssize_t C_LSN, C_SEQ, C_OLD, C_NEW, T_DATA, I_XID, I_FINAL_LSN, I_COMMIT_TIME


cdef class Step:
    cdef public Py_ssize_t index
    cdef public bint varlena
    cdef public int kind
    cdef public object column, codec
    cdef public str name, attnum


cdef class TableBuffer:
    cdef public object rel, layout, schema
    cdef public tuple key
    cdef public list columns, steps, paths
    cdef public Py_ssize_t parts, rows, pending_bytes


@cython.locals(live=Py_ssize_t, i=Py_ssize_t)
cpdef list new_columns(list steps, schema)


@cython.locals(buf=TableBuffer)
cpdef TableBuffer buffer_of(self, rel)


@cython.locals(datums=list, texts=dict, i=Py_ssize_t, step=Step)
cdef dict put_values(list cols, list steps, layout, tup, lsn, toast, list unchanged)


@cython.locals(cols=list, old_texts=dict, step=Step)
cdef dict old_identity(TableBuffer buf, old, lsn)


@cython.locals(cols=list, n=Py_ssize_t, rows=Py_ssize_t, i=Py_ssize_t, unchanged=list,
               size=Py_ssize_t)
cdef put_row(self, TableBuffer buf, txn, lsn, seq, str op, new, old, toast)


cpdef flush(self, TableBuffer buf)


@cython.locals(op=str)
cpdef change(self, txn, rel, int action, chg, toast)


@cython.locals(buf=TableBuffer)
cpdef rewrite(self, txn, rel, chg, toast, first)


cpdef truncate(self, txn, rels, chg)
