# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.tuples.arrays.text` (see :mod:`cdclake.native`): array_out
of the commonest arrays, one-dimensional int2[], int4[] and int8[] starting at 1, NULLs
included, written into one C buffer with no per-element object.

Any other array (other element types, more dimensions, another lower bound, a malformed or
cut-off datum) goes to the Python reference, which returns its text or raises its error.
"""

from cdclake.tuples._bytes cimport decimal, le_int
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.string cimport memcpy

from cdclake.tuples import arrays as _reference
from cdclake.tuples import scalars


def text(p, elem_len, elem_align, elem_oid, etext, delim, quote):
    """See ``arrays.text``."""
    cdef int elen = 2 if etext is scalars.int2_text else 4 if etext is scalars.int4_text \
        else 8 if etext is scalars.int8_text else 0
    if (elen == 0 or elem_len != elen or delim != "," or type(p) is not bytes
            or PyBytes_GET_SIZE(p) < 20):
        return _reference._python_text(p, elem_len, elem_align, elem_oid, etext, delim, quote)
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(p)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(p)
    cdef long long ndim = le_int(b, 4), dataoffset = le_int(b + 4, 4)
    cdef long long elemtype = le_int(b + 8, 4)
    cdef long long nitems = le_int(b + 12, 4), lb = le_int(b + 16, 4)
    cdef int m = 1 if elen == 2 else 3 if elen == 4 else 7
    cdef Py_ssize_t off, stride, bitmap_at = 20, o = 0, i
    cdef const unsigned char *bitmap = NULL
    cdef char *out
    if (ndim != 1 or lb != 1 or nitems <= 0 or elem_oid is None
            or (elemtype & 0xFFFFFFFF) != elem_oid or _reference._ALIGN.get(elem_align) != m):
        return _reference._python_text(p, elem_len, elem_align, elem_oid, etext, delim, quote)
    if dataoffset:
        off = dataoffset - 4
        if bitmap_at + (nitems + 7) // 8 > off or off > n:
            return _reference._python_text(p, elem_len, elem_align, elem_oid, etext, delim,
                                           quote)
        bitmap = b + bitmap_at
    else:
        off = ((bitmap_at + 4 + 7) & ~7) - 4
    off = ((off + 4 + m) & ~m) - 4
    stride = (elen + m) & ~m
    out = <char *> PyMem_Malloc(nitems * 21 + 2)
    if out == NULL:
        raise MemoryError()
    try:
        out[0] = 123  # {
        o = 1
        for i in range(nitems):
            if i:
                out[o] = 44  # ,
                o += 1
            if bitmap != NULL and not (bitmap[i >> 3] >> (i & 7)) & 1:
                memcpy(out + o, b"NULL", 4)
                o += 4
                continue
            if off + elen > n:
                return _reference._python_text(p, elem_len, elem_align, elem_oid, etext,
                                               delim, quote)
            o += decimal(out + o, le_int(b + off, elen))
            off += stride
        out[o] = 125  # }
        return PyUnicode_DecodeASCII(out, o + 1, NULL)
    finally:
        PyMem_Free(out)
