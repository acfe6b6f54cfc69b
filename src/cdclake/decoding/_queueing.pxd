# cython: language_level=3
"""C types for ``queueing.py`` compiled as ``cdclake.decoding._queueing`` (Cython's
pure-Python mode): the compiled decoder asks whose a change is, and queues it, with these
(``cimport``)."""

import cython


cpdef bint foreign(decoder, xid) except -1


cpdef bint mine(decoder, xid, lsn) except -1


@cython.locals(i=Py_ssize_t)
cpdef bint elsewhere(decoder, xid, lsn, origin, loc, Py_ssize_t count=*,
                     bint last_clears=*) except -1


cpdef queue_change(decoder, xid, lsn, change, int known=*)


cpdef buffer_change(rb, xid, change)
