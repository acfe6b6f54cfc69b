# cython: language_level=3
"""What other compiled modules take from the compiled routing of :mod:`cdclake.decoding.rmgrs`:
the routing classes, a heap record's class from its headers, and whether a change can be
dealt out to one decoder."""

from cdclake.wal._reader cimport Shape

# the routing classes of cdclake.decoding.rmgrs
cdef enum:
    IGNORE = 0
    ALL = 1
    TXN = 2
    CATALOG = 3

cdef int heap_class(unsigned int rmid, unsigned int info, unsigned int xid, Shape *s,
                    unsigned int db) nogil
cdef bint shared_out(unsigned int rmid, unsigned int info, const unsigned char *main,
                     Py_ssize_t main_len) nogil
