# cython: language_level=3
"""A growing C output buffer (inlined where it is used: ``cdclake waldump``'s compiled lines,
``_waldump.pyx``): a line's bytes are written into it, then decoded to ``str`` once."""

from cpython.mem cimport PyMem_Realloc
from libc.string cimport memcpy


cdef struct Out:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef inline int grow(Out *o, Py_ssize_t k) except -1:
    """Room for ``k`` more bytes (the buffer may start empty: NULL, capacity 0)."""
    cdef Py_ssize_t cap = o.cap or 64
    cdef char *p
    while o.n + k > cap:
        cap *= 2
    if cap != o.cap:
        p = <char *> PyMem_Realloc(o.p, cap)
        if p == NULL:
            raise MemoryError()
        o.p = p
        o.cap = cap
    return 0


cdef inline int put(Out *o, const char *s, Py_ssize_t k) except -1:
    if o.n + k > o.cap:
        grow(o, k)
    memcpy(o.p + o.n, s, k)
    o.n += k
    return 0
