# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.tuples.numeric.text` (see :mod:`cdclake.native`):
numeric_out's text written digit by digit from the base-10000 digits, as numeric.c's
get_str_from_var does, with no big integer in between.

Anything but a well-formed short or long numeric with at most 1000 digits, each 0..9999 (a
special value, a malformed datum) goes to the Python reference, which returns its text or
raises its error.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII

from cdclake.tuples import numeric as _reference

cdef int MAX_DIGITS = 1000


cdef inline Py_ssize_t _put4(char *cp, int dig, bint leading) noexcept:
    """Write base-10000 digit ``dig`` as 4 decimal digits, or without its leading zeros
    (keeping the last) when ``leading``; how many characters were written."""
    cdef Py_ssize_t n = 0
    cdef int div = 1000, d1
    cdef bint putit = not leading
    while div > 1:
        d1 = dig // div
        dig -= d1 * div
        putit |= d1 > 0
        if putit:
            cp[n] = 48 + d1
            n += 1
        div //= 10
    cp[n] = 48 + dig
    return n + 1


def text(p):
    """See ``numeric.text``."""
    if type(p) is not bytes:
        return _reference._python_text(p)
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(p)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(p)
    cdef unsigned int header
    cdef bint neg
    cdef int dscale, weight, start, ndigits, d, i, dig
    if size < 2:
        return _reference._python_text(p)
    header = b[0] | (b[1] << 8)
    if header & 0xC000 == 0x8000:  # short
        neg = (header & 0x2000) != 0
        dscale = (header & 0x1F80) >> 7
        weight = (header & 0x3F) - 64 if header & 0x40 else header & 0x3F
        start = 2
    elif header & 0xC000 == 0xC000 or size < 4:  # special, or a cut-off long header
        return _reference._python_text(p)
    else:
        neg = (header & 0xC000) == 0x4000
        dscale = header & 0x3FFF
        weight = <short> (b[2] | (b[3] << 8))
        start = 4
    if (size - start) & 1:
        return _reference._python_text(p)
    ndigits = (size - start) >> 1
    if ndigits > MAX_DIGITS:
        return _reference._python_text(p)
    for i in range(ndigits):  # a digit outside 0..9999 is no numeric PostgreSQL writes
        if (b[start + 2 * i] | (b[start + 2 * i + 1] << 8)) > 9999:
            return _reference._python_text(p)
    if ndigits and weight >= 0 and b[start] == 0 and b[start + 1] == 0:
        return _reference._python_text(p)  # a leading zero digit: PostgreSQL strips them
    # sign, integer part, point, fraction: at most 1 + 4 * (weight + 1) + 1 + dscale + 4
    cdef Py_ssize_t cap = 2 + 4 * (weight + 1 if weight >= 0 else 1) + dscale + 4
    cdef bytearray buf = bytearray(cap)
    cdef char *cp = buf
    cdef Py_ssize_t n = 0
    if neg:
        cp[0] = 45  # '-'
        n = 1
    if ndigits == 0 or weight < 0:
        cp[n] = 48
        n += 1
        d = weight + 1 if ndigits else 0
    else:
        for d in range(weight + 1):
            dig = (b[start + 2 * d] | (b[start + 2 * d + 1] << 8)) if d < ndigits else 0
            n += _put4(cp + n, dig, d == 0)
        d = weight + 1
    if dscale > 0:
        cp[n] = 46  # '.'
        n += 1
        end = n + dscale
        i = 0
        while i < dscale:
            dig = (b[start + 2 * d] | (b[start + 2 * d + 1] << 8)) if 0 <= d < ndigits else 0
            _put4(cp + n, dig, False)
            n += 4
            d += 1
            i += 4
        n = end
    return PyUnicode_DecodeASCII(cp, n, NULL)
