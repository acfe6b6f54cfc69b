# cython: language_level=3
"""C types for ``commit.py`` compiled as ``cdclake.decoding._commit`` (Cython's pure-Python
mode): its ``decode_xact`` is the compiled decoder's handler of the transaction rmgr's
records (``cdclake.native``)."""

import cython


@cython.locals(txns=list, ddl=bint, counts=bint)
cpdef commit(decoder, xid, lsn, end_lsn, origin, commit_time, origin_lsn, gid, db_id,
             tuple subxacts)


cdef Py_ssize_t I_XID, I_FIRST, I_FINAL, I_END, I_TIME, I_ORIGIN, I_OLSN, I_GID


cdef object _txn_info(xid, first_lsn, final_lsn, end_lsn, commit_time, origin, origin_lsn, gid)


cdef unsigned int XACT_XINFO_HAS_ORIGIN, XLOG_XACT_OPMASK, XLOG_XACT_COMMIT
cdef unsigned int XLOG_XACT_COMMIT_PREPARED, XLOG_XACT_ABORT, XLOG_XACT_ABORT_PREPARED
cdef unsigned int XLOG_XACT_PREPARE, XLOG_XACT_ASSIGNMENT


@cython.locals(op=cython.uint, xinfo=cython.uint)
cpdef decode_xact(decoder, rec)
