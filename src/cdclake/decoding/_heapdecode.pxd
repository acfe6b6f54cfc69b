# cython: language_level=3
"""C types for ``heapdecode.py`` compiled as ``cdclake.decoding._heapdecode`` (Cython's
pure-Python mode): its ``decode_heap`` and ``decode_heap2`` are the compiled decoder's
handlers of the heap rmgrs' records (``cdclake.native``)."""

import cython

cdef unsigned int XLH_DELETE_CONTAINS_OLD, XLH_DELETE_IS_SUPER, XLH_INSERT_CONTAINS_NEW_TUPLE
cdef unsigned int XLH_INSERT_IS_SPECULATIVE, XLH_INSERT_LAST_IN_MULTI
cdef unsigned int XLH_INSERT_ON_TOAST_RELATION, XLH_TRUNCATE_CASCADE
cdef unsigned int XLH_TRUNCATE_RESTART_SEQS, XLH_UPDATE_CONTAINS_NEW_TUPLE
cdef unsigned int XLH_UPDATE_CONTAINS_OLD, XLOG_HEAP_CONFIRM, XLOG_HEAP_DELETE
cdef unsigned int XLOG_HEAP_HOT_UPDATE, XLOG_HEAP_INSERT, XLOG_HEAP_OPMASK
cdef unsigned int XLOG_HEAP_TRUNCATE, XLOG_HEAP_UPDATE, XLOG_HEAP2_MULTI_INSERT
cdef unsigned int XLOG_HEAP2_OPMASK
cdef Py_ssize_t SIZE_OF_DELETE, SIZE_OF_UPDATE
cdef int INSERT, UPDATE, DELETE, SPEC_INSERT, SPEC_ABORT, SPEC_CONFIRM, TOAST_CHUNK, TRUNCATE

cdef Py_ssize_t R_LSN, R_XID, R_ORIGIN, R_INFO, R_MAIN_DATA, R_BLOCKS


cdef bint _origin_ok(filt, origin) except -1


cdef bint _drop(filt, loc, lsn) except -1


cdef bint _is_pg_class(tracker, loc) except -1


@cython.locals(op=cython.uint, flags=cython.uint, speculative=bint, at=Py_ssize_t,
               blocks=list)
cpdef decode_heap(decoder, rec)


cdef _toast_chunk(decoder, rec, xid, lsn, origin, loc, tup)


cdef _truncate(decoder, rec)


cdef _pg_class(decoder, rec, unsigned int op)


@cython.locals(info=cython.uint, flags=cython.uint, count=Py_ssize_t, i=Py_ssize_t,
               last_in_multi=bint, tuples=list, blocks=list)
cpdef decode_heap2(decoder, rec)
