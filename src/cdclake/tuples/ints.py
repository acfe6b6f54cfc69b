# cython: boundscheck=False, wraparound=False, cdivision=True
"""Integers in a datum and in text, as C handles them: little-endian fields read from the
bytes PostgreSQL stored, and decimal digits written into an output buffer.

The texts that run once per value a decoder prints (arrays, dates and timestamps) are
written into a buffer, a ``bytearray`` in Python and a C array where their module is
compiled; this file is compiled as itself too (Cython's pure-Python mode, ``_ints.pxd``),
and those modules call its functions as C. Every division here has non-negative operands,
where C's and Python's agree.
"""

from __future__ import annotations


def le_uint(b: bytes, at: int, width: int) -> int:
    """The little-endian unsigned integer of ``width`` (at most 8) bytes at ``b[at]``."""
    u = 0
    for k in range(at + width - 1, at - 1, -1):
        u = u << 8 | b[k]
    return u


def le_int(b: bytes, at: int, width: int) -> int:
    """The little-endian two's complement integer of ``width`` (2, 4 or 8) bytes at
    ``b[at]``."""
    u = le_uint(b, at, width)
    top = 1
    top <<= 8 * width - 1  # the sign bit (a C unsigned shift where compiled)
    return u - top - top if u & top else u  # modulo 2**64 where compiled: the same bits


def put_uint(buf: bytearray, o: int, u: int, digits: int) -> int:
    """Write ``u`` in decimal at ``buf[o]``, zero-padded to at least ``digits`` digits;
    return where it ends."""
    start = o
    while True:
        buf[o] = 48 + u % 10
        o += 1
        u //= 10
        digits -= 1
        if u == 0 and digits <= 0:
            break
    i = start
    j = o - 1
    while i < j:
        c = buf[i]
        buf[i] = buf[j]
        buf[j] = c
        i += 1
        j -= 1
    return o


def put_int(buf: bytearray, o: int, v: int) -> int:
    """Write ``v`` in decimal at ``buf[o]`` as int8out prints it (a minus sign, no padding);
    return where it ends."""
    if v < 0:
        buf[o] = 45  # -
        return put_uint(buf, o + 1, magnitude(v), 1)
    return put_uint(buf, o, v, 1)


def magnitude(v: int) -> int:
    """``|v|`` as an unsigned integer: right for -2**63 too, whose magnitude no int64 holds."""
    if v >= 0:
        return v
    u = -(v + 1)
    return u + 1  # unsigned where compiled

