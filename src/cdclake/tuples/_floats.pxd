# cython: language_level=3
"""C types for ``floats.py`` compiled as ``cdclake.tuples._floats`` (Cython's pure-Python
mode): float8out's digits from ``PyOS_double_to_string``, its text written into a C buffer
(``cdclake.native``)."""

import cython

cdef unsigned long long HIDDEN_BIT, FRACTION_MASK


@cython.locals(out=cython.char[32], o=int, i=int, ae=int)
cdef str layout(bint neg, const char *s, int n, int exp, int fixed_below)


@cython.locals(bits=cython.ulonglong, neg=bint, biased=int, frac=cython.ulonglong,
               m=cython.ulonglong, q=int, x=double, r=cython.p_char, n=int, lead=int, e10=int,
               i=int, point=int, esign=bint, exp=int, digits=cython.ulonglong,
               data=bytes, s=cython.char[24])
cpdef str float8_datum_text(p)


cdef bint on_bound(unsigned long long m, int q, bint narrow_below, unsigned long long digits,
                   int k) noexcept


@cython.locals(i=int, j=int, j2=int)
cdef bint same(unsigned long long d, int k, unsigned long long b, int t) noexcept
