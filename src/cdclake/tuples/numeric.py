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
"""

from __future__ import annotations

import struct
from decimal import Decimal

from cdclake import native
from cdclake.tuples.untypeable import NotTypeable

NUMERIC_SIGN_MASK = 0xC000
NUMERIC_NEG = 0x4000
NUMERIC_SHORT = 0x8000
NUMERIC_SPECIAL = 0xC000
NUMERIC_NAN = 0xC000
NUMERIC_PINF = 0xD000
NUMERIC_NINF = 0xF000

_U16 = struct.Struct("<H")
_I16 = struct.Struct("<h")
_DIGIT_STRUCTS = [struct.Struct(f"<{n}h") for n in range(0, 65)]

SPECIAL_TEXT = {NUMERIC_NAN: "NaN", NUMERIC_PINF: "Infinity", NUMERIC_NINF: "-Infinity"}


class NumericFormatError(ValueError):
    """The bytes are not a numeric datum."""


def unpack(p: bytes) -> tuple[bool, int, int, int] | str:
    """(negative, integer of all digits, exponent of 10 of its last digit, dscale), or the
    text of a special value (NaN, Infinity, -Infinity)."""
    if len(p) < 2:
        raise NumericFormatError(f"numeric datum of {len(p)} bytes has no header")
    header = _U16.unpack_from(p)[0]
    flag = header & NUMERIC_SIGN_MASK
    if flag == NUMERIC_SHORT:
        neg = bool(header & 0x2000)
        dscale = (header & 0x1F80) >> 7
        weight = (header & 0x3F) - 64 if header & 0x40 else header & 0x3F
        start = 2
    elif flag == NUMERIC_SPECIAL:
        text = SPECIAL_TEXT.get(header)
        if text is None:
            raise NumericFormatError(f"numeric special header 0x{header:04X} is not NaN/Inf")
        return text
    else:
        if len(p) < 4:
            raise NumericFormatError("numeric long header cut off")
        neg = flag == NUMERIC_NEG
        dscale = header & 0x3FFF
        weight = _I16.unpack_from(p, 2)[0]
        start = 4
    nbytes = len(p) - start
    if nbytes & 1:
        raise NumericFormatError(f"numeric digits take an odd number of bytes ({nbytes})")
    ndigits = nbytes >> 1
    if ndigits == 0:
        return neg, 0, 0, dscale
    if ndigits < len(_DIGIT_STRUCTS):
        digits = _DIGIT_STRUCTS[ndigits].unpack_from(p, start)
    else:
        digits = struct.unpack_from(f"<{ndigits}h", p, start)
    n = 0
    for d in digits:
        n = n * 10000 + d
    return neg, n, 4 * (weight - ndigits + 1), dscale


def text(p: bytes) -> str:
    """numeric_out (get_str_from_var): integer part, then exactly dscale fraction digits."""
    u = unpack(p)
    if isinstance(u, str):
        return u
    neg, n, exp10, dscale = u
    shift = exp10 + dscale
    scaled = n * 10 ** shift if shift >= 0 else n // 10 ** (-shift)
    s = str(scaled)
    if dscale > 0:
        if len(s) <= dscale:
            s = "0" * (dscale - len(s) + 1) + s
        s = f"{s[:-dscale]}.{s[-dscale:]}"
    return "-" + s if neg else s


#: the reference, which the compiled twin falls back to for what it does not take
_python_text = text
text = native.twin(text, "cdclake.tuples._numeric")


def decimal(p: bytes) -> Decimal:
    """The value as a Decimal with exponent -dscale; NaN and infinities are not typeable."""
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
