# cython: language_level=3
"""C types for ``ints.py`` compiled as ``cdclake.tuples._ints`` (Cython's pure-Python mode):
the functions the compiled texts call as C (``cimport``)."""

import cython


@cython.locals(u=cython.ulonglong, k=Py_ssize_t)
cdef unsigned long long le_uint(const unsigned char *b, Py_ssize_t at, int width) noexcept


@cython.locals(u=cython.ulonglong, top=cython.ulonglong)
cdef long long le_int(const unsigned char *b, Py_ssize_t at, int width) noexcept


@cython.locals(start=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, c=char)
cdef Py_ssize_t put_uint(char *buf, Py_ssize_t o, unsigned long long u, int digits) noexcept


cdef Py_ssize_t put_int(char *buf, Py_ssize_t o, long long v) noexcept


@cython.locals(u=cython.ulonglong)
cdef unsigned long long magnitude(long long v) noexcept

