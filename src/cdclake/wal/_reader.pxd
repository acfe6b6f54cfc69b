# cython: language_level=3
"""What other compiled modules take from the compiled reader: :class:`Sieve`, which
:func:`cdclake.wal._reader.sift` asks which records to build, :func:`shape`, what a sieve
reads of a record's headers, and :func:`crc32c_of`, the CRC step the reader checks with."""


# a record's headers, as far as a sieve reads them
cdef struct Shape:
    unsigned int toplevel  # the toplevel-xid block's xid; 0 without one
    int nblocks
    unsigned int first_db, first_rel  # the first block reference's relation
    Py_ssize_t main_len  # the main data is the record's last main_len bytes


cdef unsigned int crc32c_of(const unsigned char *d, Py_ssize_t n) except? 0


cdef int shape(const unsigned char *d, Py_ssize_t n, Py_ssize_t tot_len, Shape *s) nogil


cdef class Sieve:
    cdef int raw(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                 unsigned int rmid, unsigned int info, Py_ssize_t tot_len,
                 const unsigned char *d, Py_ssize_t n) except -1
