# cython: language_level=3
"""C types for ``reorder.py`` compiled as ``cdclake.decoding._reorder`` (Cython's pure-Python
mode): the compiled decoder finds a change's top-level transaction, queues every change it
reads, and ends every transaction it commits, with these (``cimport``)."""

import cython


@cython.locals(by_txn=dict)
cpdef object top_of(rb, xid)


@cython.locals(by_txn=dict)
cpdef object txn(rb, xid, lsn)


@cython.locals(n=Py_ssize_t, changes=list)
cpdef queue(rb, xid, change)


@cython.locals(by_txn=dict, out=list)
cpdef list members(rb, xid, subxids)


cpdef object merged_changes(list txns)


@cython.locals(by_txn=dict, seen=set, todo=list)
cpdef discard(rb, xid, subxids=*)
