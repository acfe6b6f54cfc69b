# cython: language_level=3
"""C types for ``waldump.py`` compiled as ``cdclake._waldump`` (Cython's pure-Python mode):
the hot records' fields as C integers, their f-strings C formatting (``cdclake.native``)."""

import cython

cdef long long FIRST_PLAIN_US, LAST_PLAIN_US, POSTGRES_EPOCH_JDATE, USECS_PER_DAY
cdef unsigned int HEAP_OPMASK, HEAP_INSERT, HEAP_UPDATE, HEAP_HOT_UPDATE, HEAP_DELETE
cdef unsigned int XACT_OPMASK, XACT_COMMIT, XINFO_HAS_DBINFO
cdef dict _kinds, _rmgr_json
cdef tuple _FORK_JSON


@cython.locals(key=cython.longlong, kind=str)
cpdef str record_type(rec, int version)


@cython.locals(days=cython.longlong, t=cython.longlong, y=cython.longlong, m=cython.longlong,
               d=cython.longlong, secs=cython.longlong)
cpdef str _timestamp(long long us)


@cython.locals(fields=tuple)
cpdef str _desc_xact(rec, int version)


@cython.locals(op=cython.uint, off=cython.uint, flags=cython.uint, xmax=cython.uint,
               bits=cython.uint, new_xmax=cython.uint, new_off=cython.uint,
               _prefix=cython.uint, _suffix=cython.uint, _at=Py_ssize_t)
cpdef str _desc_heap(rec, int _version)


@cython.locals(kind=str, detail=str)
cpdef str describe(rec, int version)


@cython.locals(lsn=cython.ulonglong, prev=cython.ulonglong, rmid=int, rmgr=str,
               rec_len=cython.longlong, parts=list, fork=int)
cpdef str record_json_line(rec, int version)
