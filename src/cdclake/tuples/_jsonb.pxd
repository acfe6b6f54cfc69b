# cython: language_level=3
"""C types for ``jsonb.py`` compiled as ``cdclake.tuples._jsonb`` (Cython's pure-Python mode):
jsonb_out written through a C pointer into one growing buffer (``cdclake.native``)."""

import cython

cdef unsigned int JB_CMASK, JB_FSCALAR, JB_FOBJECT, JB_FARRAY
cdef unsigned int JENTRY_OFFLENMASK, JENTRY_TYPEMASK, JENTRY_HAS_OFF, JENTRY_ISSTRING
cdef unsigned int JENTRY_ISNUMERIC, JENTRY_ISBOOL_FALSE, JENTRY_ISBOOL_TRUE, JENTRY_ISNULL
cdef unsigned int JENTRY_ISCONTAINER
cdef int MAX_DEPTH
cdef bytes _SHORT, _HEX


@cython.locals(b=bytes, bp=cython.p_const_uchar, n=Py_ssize_t, header=cython.longlong,
               out=bytearray, end=Py_ssize_t, buf=cython.p_char)
cpdef str text(p)


cdef long long u32(const unsigned char *bp, Py_ssize_t n, Py_ssize_t off) except -1


@cython.locals(header=cython.longlong, count=Py_ssize_t, is_object=bint, nentries=Py_ssize_t,
               jstart=Py_ssize_t, base=Py_ssize_t, end=Py_ssize_t, keys_end=Py_ssize_t,
               i=Py_ssize_t, koff=Py_ssize_t, voff=Py_ssize_t, kend=Py_ssize_t, vend=Py_ssize_t,
               k=Py_ssize_t)
cdef Py_ssize_t container(bytearray out, Py_ssize_t o, bytes b, const unsigned char *bp,
                          Py_ssize_t n, Py_ssize_t start, bint scalar, int depth) except -1


@cython.locals(je=cython.uint)
cdef Py_ssize_t entry_end(const unsigned char *bp, Py_ssize_t jstart, Py_ssize_t i,
                          Py_ssize_t off) noexcept


@cython.locals(at=Py_ssize_t)
cdef unsigned int jentry(const unsigned char *bp, Py_ssize_t jstart, Py_ssize_t i) noexcept


@cython.locals(jtype=cython.uint, lo=Py_ssize_t, digits=str)
cdef Py_ssize_t child(bytearray out, Py_ssize_t o, bytes b, const unsigned char *bp,
                      Py_ssize_t n, Py_ssize_t base, unsigned int je, Py_ssize_t off,
                      Py_ssize_t end, int depth) except -1


@cython.locals(b0=int, size=Py_ssize_t)
cdef bytes numeric_payload(bytes b, const unsigned char *bp, Py_ssize_t lo, Py_ssize_t hi)


cdef int room(bytearray out, Py_ssize_t o, Py_ssize_t k) except -1


@cython.locals(buf=cython.p_char, i=Py_ssize_t)
cdef Py_ssize_t put(bytearray out, Py_ssize_t o, bytes s) except -1


@cython.locals(k=Py_ssize_t, buf=cython.p_char, i=Py_ssize_t, c=int)
cdef Py_ssize_t string(bytearray out, Py_ssize_t o, const unsigned char *bp, Py_ssize_t lo,
                       Py_ssize_t hi, Py_ssize_t n) except -1
