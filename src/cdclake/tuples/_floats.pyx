# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.tuples.floats.float8_datum_text` (see
:mod:`cdclake.native`): float8out of an 8-byte datum.

The digits are Python's shortest round-trip repr (``PyOS_double_to_string``, the C function
``repr`` calls), which PostgreSQL's Ryu prints too except where the repr lands exactly on a
rounding bound (see :mod:`cdclake.tuples.floats`). That test is exact here without big
integers: the candidate ``D * 10**k`` and a bound ``B * 2**t`` (B odd) are equal only if their
factorizations into a part prime to 10, a power of 2 and a power of 5 are. A value on a bound,
a subnormal and a datum that is not 8 bytes go to the Python reference.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.math cimport frexp, isinf, isnan, signbit
from libc.string cimport memcpy

from cdclake.tuples import floats as _reference


cdef extern from "Python.h":
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL


cdef union Double:
    double d
    unsigned long long u


cdef bint _same(unsigned long long d, int k, unsigned long long b, int t) noexcept:
    """Whether ``d * 10**k == b * 2**t`` (``d`` > 0, ``b`` odd)."""
    cdef int i = 0, j = 0, j2 = 0
    while d % 2 == 0:
        d //= 2
        i += 1
    while d % 5 == 0:
        d //= 5
        j += 1
    while b % 5 == 0:
        b //= 5
        j2 += 1
    return d == b and i + k == t and j + k == j2


cdef bint _on_bound(double x, unsigned long long digits, int k) noexcept:
    """``_on_double_boundary`` for a positive normal double: is ``digits * 10**k`` half an ulp
    from ``x`` (a quarter below, at a power of two)?"""
    cdef int e
    cdef double f = frexp(x, &e)
    cdef unsigned long long m = <unsigned long long> (f * 9007199254740992.0)  # f * 2**53
    cdef int q = e - 53
    if _same(digits, k, 2 * m + 1, q - 1) or _same(digits, k, 2 * m - 1, q - 1):
        return True
    return m == (1ULL << 52) and _same(digits, k, 4 * m - 1, q - 2)


def float8_datum_text(p):
    """See ``floats.float8_datum_text``."""
    cdef Double v
    cdef char *r
    cdef char s[17]  # the significant digits
    cdef char out[32]
    cdef int n = 0, point = -1, lead = 0, e10 = 0, exp, i, o = 0, ae
    cdef bint neg, esign
    cdef double x
    cdef unsigned long long digits = 0
    if type(p) is not bytes or PyBytes_GET_SIZE(p) != 8:
        return _reference._python_float8_datum_text(p)
    memcpy(&v.u, PyBytes_AS_STRING(p), 8)
    x = v.d
    if isnan(x):
        return "NaN"
    if isinf(x):
        return "-Infinity" if x < 0 else "Infinity"
    neg = signbit(x)
    if x == 0:
        return "-0" if neg else "0"
    if abs(x) < 2.2250738585072014e-308:  # subnormal: the reference's own ulp rule
        return _reference._python_float8_datum_text(p)
    r = PyOS_double_to_string(abs(x), b'r', 0, 0, NULL)
    try:
        i = 0
        while r[i] != 0 and r[i] != b'e':
            if r[i] == b'.':
                point = n + lead
            elif n == 0 and r[i] == b'0':
                lead += 1
            else:
                s[n] = r[i]
                n += 1
            i += 1
        if r[i] == b'e':
            esign = r[i + 1] == b'-'
            i += 2
            while r[i] != 0:
                e10 = e10 * 10 + (r[i] - 48)
                i += 1
            if esign:
                e10 = -e10
    finally:
        PyMem_Free(r)
    if point < 0:
        point = n + lead
    # significant digits s[:n] (trailing zeros dropped below); first one at 10**exp
    exp = point - lead - 1 + e10
    while n > 1 and s[n - 1] == b'0':
        n -= 1
    if n < 17:
        for i in range(n):
            digits = digits * 10 + (s[i] - 48)
        if _on_bound(abs(x), digits, exp - n + 1):
            return _reference._python_float8_datum_text(p)
    if neg:
        out[o] = b'-'
        o += 1
    if -4 <= exp < 15:
        if exp < 0:
            out[o] = b'0'
            out[o + 1] = b'.'
            o += 2
            for i in range(-exp - 1):
                out[o] = b'0'
                o += 1
            memcpy(out + o, s, n)
            o += n
        elif exp + 1 >= n:
            memcpy(out + o, s, n)
            o += n
            for i in range(exp + 1 - n):
                out[o] = b'0'
                o += 1
        else:
            memcpy(out + o, s, exp + 1)
            o += exp + 1
            out[o] = b'.'
            o += 1
            memcpy(out + o, s + exp + 1, n - exp - 1)
            o += n - exp - 1
    else:
        out[o] = s[0]
        o += 1
        if n > 1:
            out[o] = b'.'
            o += 1
            memcpy(out + o, s + 1, n - 1)
            o += n - 1
        out[o] = b'e'
        out[o + 1] = b'-' if exp < 0 else b'+'
        o += 2
        ae = -exp if exp < 0 else exp
        if ae >= 100:
            out[o] = 48 + ae // 100
            o += 1
        out[o] = 48 + ae // 10 % 10
        out[o + 1] = 48 + ae % 10
        o += 2
    return PyUnicode_DecodeASCII(out, o, NULL)
