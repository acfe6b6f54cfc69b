# cython: language_level=3
"""C types for ``commit.py`` compiled as ``cdclake.decoding._commit`` (Cython's pure-Python
mode): the compiled decoder commits every ordinary transaction with it (``cimport``)."""

import cython


@cython.locals(txns=list, ddl=bint, counts=bint)
cpdef commit(decoder, xid, lsn, end_lsn, origin, commit_time, origin_lsn, gid, db_id,
             tuple subxacts)


cdef Py_ssize_t I_XID, I_FIRST, I_FINAL, I_END, I_TIME, I_ORIGIN, I_OLSN, I_GID


cdef object _txn_info(xid, first_lsn, final_lsn, end_lsn, commit_time, origin, origin_lsn, gid)
