# cython: language_level=3
"""What other compiled modules take from the compiled reader: :class:`Sieve`, which
:func:`cdclake.wal._reader.sift` asks which records to build."""


cdef class Sieve:
    cdef int raw(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                 unsigned int rmid, unsigned int info, Py_ssize_t tot_len,
                 const unsigned char *d, Py_ssize_t n) except -1
