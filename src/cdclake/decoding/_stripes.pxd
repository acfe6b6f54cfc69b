# cython: language_level=3
"""C types for ``stripes.py`` compiled as ``cdclake.decoding._stripes`` (Cython's pure-Python
mode): a ``Shares`` with C fields, and the question the compiled decoder and replayer ask it
once per change (``cimport``)."""

import cython


cpdef unsigned long long stripe_owner(unsigned long long top, unsigned long long lsn,
                                      unsigned long long jobs, unsigned int bits=*)


cdef class Shares:
    cdef public unsigned int bits
    cdef public unsigned long long index, jobs, last

    cpdef unsigned long long stripe(self)

    cpdef bint says(self, unsigned long long top, unsigned long long lsn) except -1


@cython.locals(shares=Shares)
cpdef bint says_yes(object share, object top, object lsn) except -1
