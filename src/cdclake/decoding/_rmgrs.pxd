# cython: language_level=3
"""What other compiled modules take from the compiled routing of :mod:`cdclake.decoding.rmgrs`:
the routing classes, what a sieve reads of a record's headers, a heap record's class from
them, and whether a change can be dealt out to one decoder."""


# a record's headers, as far as a sieve reads them
cdef struct Shape:
    unsigned int toplevel  # the toplevel-xid block's xid; 0 without one
    int nblocks
    unsigned int first_db, first_rel  # the first block reference's relation
    Py_ssize_t main_len  # the main data is the record's last main_len bytes

# the routing classes of cdclake.decoding.rmgrs
cdef enum:
    IGNORE = 0
    ALL = 1
    TXN = 2
    CATALOG = 3

cdef int shape(const unsigned char *d, Py_ssize_t n, Py_ssize_t tot_len, Shape *s) nogil
cdef int heap_class(unsigned int rmid, unsigned int info, unsigned int xid, Shape *s,
                    unsigned int db) nogil
cdef bint shared_out(unsigned int rmid, unsigned int info, const unsigned char *main,
                     Py_ssize_t main_len) nogil
