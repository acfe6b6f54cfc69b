# cython: language_level=3
"""C helpers the compiled output plugins inline where they read datums and write lines
(``decoding/plugins``: ``_inline.pxd``, ``_columns.pyx``, ``arrow.py``, ``test_decoding.py``),
and the C function float8out takes its digits from (``tuples/floats.py``)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE


cdef inline long long le_int(const unsigned char *b, int n) noexcept:
    """A little-endian signed integer of ``n`` (2, 4 or 8) bytes, as PostgreSQL stores it."""
    cdef unsigned long long u = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        u = (u << 8) | b[i]
    if n == 2:
        return <short> (<unsigned short> u)
    if n == 4:
        return <int> (<unsigned int> u)
    return <long long> u


cdef inline object plain_payload(object raw):
    """The value bytes of an inline, uncompressed varlena held in ``bytes`` (the common case);
    None for anything else (compressed, external, malformed), which ``column_payload``
    handles with its checks and errors."""
    if type(raw) is not bytes:
        return None
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef unsigned int size
    if n == 0:
        return None
    if b[0] & 1:
        if b[0] != 1 and (b[0] >> 1) == n:
            return PyBytes_FromStringAndSize(<const char *> b + 1, n - 1)
        return None
    if n < 4 or b[0] & 2:
        return None
    size = (b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)) >> 2
    if size != n:
        return None
    return PyBytes_FromStringAndSize(<const char *> b + 4, n - 4)


cdef inline Py_ssize_t decimal(char *out, long long v) noexcept:
    """Write ``v`` in decimal to ``out`` (room for 20 bytes), as ``%lld`` would; return the
    length. Integers are the commonest values in a change's line, and ``snprintf`` or a
    Python ``int`` costs several times this."""
    cdef char digits[20]
    cdef unsigned long long u = (<unsigned long long> 0) - <unsigned long long> v if v < 0 \
        else <unsigned long long> v
    cdef Py_ssize_t k = 0, n = 0
    while True:
        digits[k] = <char> (48 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    if v < 0:
        out[0] = 45  # -
        n = 1
    while k:
        k -= 1
        out[n] = digits[k]
        n += 1
    return n


cdef extern from "Python.h":
    # the shortest round-trip digits of a double ('r'), as repr prints them; PyMem_Free it
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
