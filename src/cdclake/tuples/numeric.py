# cython: boundscheck=False, wraparound=False, cdivision=True
"""numeric on disk (utils/adt/numeric.c) -> numeric_out text, Decimal.

After the varlena header a numeric is either

* NumericShort: uint16 header ``1 0 s dddddd w wwwwww`` (sign bit 0x2000, display scale in bits
  7-12, weight as a 7-bit two's complement in bits 0-6), then base-10000 int16 digits;
* NumericLong: uint16 sign+dscale (0x4000 negative, dscale in the low 14 bits), int16 weight,
  then the digits;
* special: header 0xC000 NaN, 0xD000 +Infinity, 0xF000 -Infinity.

``weight`` is the power of 10000 of the first digit; ``dscale`` the number of decimal digits
printed after the point (digits beyond it are truncated, missing ones print as zeros).

A decimal column (``numeric(p,s)``) can hold ``NaN`` (infinities only fit unconstrained
numeric, which maps to text); Arrow decimals have no NaN, so :func:`decimal` raises
:class:`~cdclake.tuples.untypeable.NotTypeable` for specials and the row keeps the text.

:func:`text` runs once per numeric value a decoder prints, so it writes the text as numeric.c's
get_str_from_var does, digit by digit into a buffer, and is compiled as itself (Cython's
pure-Python mode, ``_numeric.pxd``; the file's first line turns bounds checks off: every index
is inside the sizes :func:`header` checked). A digit outside 0..9999 is no numeric PostgreSQL
writes: a :class:`NumericFormatError`.
"""

from __future__ import annotations

from decimal import Decimal

from cdclake import native
from cdclake.tuples.untypeable import NotTypeable

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._ints import put_uint
else:
    from cdclake.tuples.ints import put_uint

NUMERIC_SIGN_MASK = 0xC000
NUMERIC_NEG = 0x4000
NUMERIC_SHORT = 0x8000
NUMERIC_SPECIAL = 0xC000
NUMERIC_NAN = 0xC000
NUMERIC_PINF = 0xD000
NUMERIC_NINF = 0xF000

SPECIAL_TEXT = {NUMERIC_NAN: "NaN", NUMERIC_PINF: "Infinity", NUMERIC_NINF: "-Infinity"}


class NumericFormatError(ValueError):
    """The bytes are not a numeric datum."""


def header(p: bytes) -> tuple[bool, int, int, int, int]:
    """(negative, dscale, weight, where the digits start, how many); how many is -1 for a
    special value (NaN, Infinity, -Infinity: :func:`special`)."""
    size = len(p)
    if size < 2:
        raise NumericFormatError(f"numeric datum of {size} bytes has no header")
    head = p[0] | (p[1] << 8)
    flag = head & NUMERIC_SIGN_MASK
    if flag == NUMERIC_SHORT:
        neg = (head & 0x2000) != 0
        dscale = (head & 0x1F80) >> 7
        weight = (head & 0x3F) - 64 if head & 0x40 else head & 0x3F
        start = 2
    elif flag == NUMERIC_SPECIAL:
        if head not in SPECIAL_TEXT:
            raise NumericFormatError(f"numeric special header 0x{head:04X} is not NaN/Inf")
        return False, 0, 0, 0, -1
    else:
        if size < 4:
            raise NumericFormatError("numeric long header cut off")
        neg = flag == NUMERIC_NEG
        dscale = head & 0x3FFF
        weight = p[2] | (p[3] << 8)
        if weight & 0x8000:
            weight -= 0x10000
        start = 4
    if (size - start) & 1:
        raise NumericFormatError(f"numeric digits take an odd number of bytes ({size - start})")
    return neg, dscale, weight, start, (size - start) >> 1


def special(p: bytes) -> str:
    """The text of a special value (its header said so)."""
    return SPECIAL_TEXT[p[0] | (p[1] << 8)]


def digit(p: bytes, start: int, i: int) -> int:
    """Base-10000 digit ``i``; one outside 0..9999 is no numeric PostgreSQL writes."""
    d = p[start + 2 * i] | (p[start + 2 * i + 1] << 8)
    if d > 9999:
        raise NumericFormatError(f"numeric digit {d if d < 0x8000 else d - 0x10000} is "
                                 "outside 0..9999")
    return d


def unpack(p: bytes) -> tuple[bool, int, int, int] | str:
    """(negative, integer of all digits, exponent of 10 of its last digit, dscale), or the
    text of a special value (NaN, Infinity, -Infinity)."""
    neg, dscale, weight, start, ndigits = header(p)
    if ndigits < 0:
        return special(p)
    n = 0
    for i in range(ndigits):
        n = n * 10000 + digit(p, start, i)
    return neg, n, 4 * (weight - ndigits + 1), dscale


def text(p: bytes) -> str:
    """numeric_out (get_str_from_var): the integer part, then exactly dscale fraction digits
    (digits beyond it truncated, missing ones zeros), written from the base-10000 digits."""
    if type(p) is not bytes:
        p = bytes(p)
    neg, dscale, weight, start, ndigits = header(p)
    if ndigits < 0:
        return special(p)
    while ndigits and weight >= 0 and digit(p, start, 0) == 0:  # PostgreSQL strips them
        start += 2
        ndigits -= 1
        weight -= 1
    # sign, integer part, point, fraction (whole digits: cut to dscale at the end)
    out = bytearray(2 + 4 * (weight + 1 if weight >= 0 else 1) + dscale + 4)
    n = 0
    if neg:
        out[0] = 45  # -
        n = 1
    if ndigits == 0 or weight < 0:
        out[n] = 48
        n += 1
        d = weight + 1 if ndigits else 0
    else:
        for d in range(weight + 1):
            n = put_uint(out, n, digit(p, start, d) if d < ndigits else 0, 1 if d == 0 else 4)
        d = weight + 1
    if dscale > 0:
        out[n] = 46  # .
        n += 1
        end = n + dscale
        i = 0
        while i < dscale:
            n = put_uint(out, n, digit(p, start, d) if 0 <= d < ndigits else 0, 4)
            d += 1
            i += 4
        n = end
    return out[:n].decode("ascii")


def decimal(p: bytes) -> Decimal:
    """The value as a Decimal with exponent -dscale; NaN and infinities are not typeable."""
    if type(p) is not bytes:
        p = bytes(p)
    u = unpack(p)
    if isinstance(u, str):
        raise NotTypeable(f"numeric {u} has no decimal value")
    neg, n, exp10, dscale = u
    shift = exp10 + dscale
    scaled = n * 10 ** shift if shift >= 0 else n // 10 ** (-shift)
    return Decimal((1 if neg else 0, tuple(map(int, str(scaled))), -dscale))


def decimal_from_text(s: str) -> Decimal:
    if s in ("NaN", "Infinity", "-Infinity"):
        raise NotTypeable(f"numeric {s} has no decimal value")
    return Decimal(s)


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    text = native.twin(text, "cdclake.tuples._numeric")
    decimal = native.twin(decimal, "cdclake.tuples._numeric")
