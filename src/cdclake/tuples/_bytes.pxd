# cython: language_level=3
"""C helpers the compiled twins of :mod:`cdclake.tuples` share, and the decoder's, which reads
a commit record's fields (inlined into each)."""


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
