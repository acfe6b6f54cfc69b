# cython: boundscheck=False, wraparound=False, cdivision=True
"""float4/float8 text output as PostgreSQL prints it with extra_float_digits >= 1 (the default).

PostgreSQL uses Ryu (common/d2s.c, f2s.c) built with STRICTLY_SHORTEST 0: the shortest decimal
strictly inside the value's rounding interval (bounds never accepted), nearest to the value,
printed in fixed notation when the decimal exponent is in [-4, 15) ([-4, 6) for float4) and as
``d.ddde+XX`` otherwise (at least two exponent digits); ``NaN``, ``Infinity``, ``-Infinity``,
``-0``. Python's ``repr`` of a double picks the same digits except when it lands exactly on a
rounding bound (Python accepts bounds with an even significand); that case is detected exactly
and recomputed. float4 has no Python repr, so its digits are searched with exact arithmetic.

:func:`float8_datum_text` runs once per float8 value a decoder prints, so this file is compiled
as itself (Cython's pure-Python mode, ``_floats.pxd``): there the digits come from
``PyOS_double_to_string`` (the C function ``repr`` calls) and the text is written into a C
buffer, with no float object, big integer or ``Fraction`` on the way but where a value sits
on a bound.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from cdclake import native

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._bytes import PyOS_double_to_string
    from cython.cimports.cdclake.tuples._ints import le_uint
    from cython.cimports.cdclake.wal._primitives import bytes_of
    from cython.cimports.cpython.mem import PyMem_Free
    from cython.cimports.libc.math import ldexp
else:
    from math import ldexp

    from cdclake.tuples.ints import le_uint
    from cdclake.wal.primitives import bytes_of

_F4 = struct.Struct("<f")
_F8 = struct.Struct("<d")

HIDDEN_BIT = 1 << 52  # a normal double's significand is its 52 stored bits and this one
FRACTION_MASK = HIDDEN_BIT - 1


def layout(neg: bool, s: bytes | bytearray, n: int, exp: int, fixed_below: int) -> str:
    """Ryu's to_chars: the digits ``s[:n]`` (no leading or trailing zeros), the first at
    10**exp. Fixed notation for -4 <= exp < fixed_below (15 for float8, 6 for float4, as
    printf's %g would with the types' DBL_DIG/FLT_DIG), ``d.ddde+XX`` otherwise (at least two
    exponent digits)."""
    if not cython.compiled:  # compiled, a C array (_floats.pxd)
        out = bytearray(32)
    o = 0
    if neg:
        out[0] = 45  # -
        o = 1
    if -4 <= exp < fixed_below:
        if exp < 0:
            out[o] = 48  # 0
            out[o + 1] = 46  # .
            o += 2
            for i in range(-exp - 1):
                out[o + i] = 48
            o += -exp - 1
            for i in range(n):
                out[o] = s[i]
                o += 1
        else:
            for i in range(max(n, exp + 1)):
                if i == exp + 1:
                    out[o] = 46
                    o += 1
                out[o] = s[i] if i < n else 48
                o += 1
        return out[:o].decode("ascii")
    out[o] = s[0]
    o += 1
    if n > 1:
        out[o] = 46
        o += 1
        for i in range(1, n):
            out[o] = s[i]
            o += 1
    out[o] = 101  # e
    out[o + 1] = 45 if exp < 0 else 43  # - +
    o += 2
    ae = -exp if exp < 0 else exp
    if ae >= 100:
        out[o] = 48 + ae // 100
        o += 1
    out[o] = 48 + ae // 10 % 10
    out[o + 1] = 48 + ae % 10
    return out[:o + 2].decode("ascii")


def _special(x: float) -> str | None:
    if x != x:
        return "NaN"
    if x == math.inf:
        return "Infinity"
    if x == -math.inf:
        return "-Infinity"
    if x == 0.0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    return None


def float8_text(x: float) -> str:
    """float8out of a Python float (the geometric types' coordinates)."""
    return float8_datum_text(_F8.pack(x))


def float8_datum_text(p: bytes) -> str:
    """float8out of a float8 column's 8-byte datum: Python's shortest round-trip digits
    (``PyOS_double_to_string``, which ``repr`` calls) in PostgreSQL's layout, unless they sit
    exactly on a rounding bound (:func:`on_bound`), where Ryu's are searched exactly."""
    data = p if type(p) is bytes else bytes(p)
    if len(data) != 8:
        raise ValueError(f"a float8 datum takes 8 bytes, not {len(data)}")
    bits = le_uint(bytes_of(data), 0, 8)
    neg = bits >> 63 != 0
    biased = bits >> 52 & 0x7FF
    frac = bits & FRACTION_MASK
    if biased == 0x7FF:
        return "NaN" if frac else "-Infinity" if neg else "Infinity"
    if biased == 0 and frac == 0:
        return "-0" if neg else "0"
    m = frac if biased == 0 else frac | HIDDEN_BIT  # |x| = m * 2**q
    q = -1074 if biased == 0 else biased - 1075
    x = ldexp(m, q)
    if cython.compiled:  # s is a C array (_floats.pxd)
        r = PyOS_double_to_string(x, b"r", 0, 0, cython.NULL)
    else:
        s = bytearray(24)
        r = repr(x).encode() + b"\0"
    # the significant digits into s[:n]; the first of them at 10**exp
    n = lead = e10 = i = 0
    point = -1
    while r[i] != 0 and r[i] != 101:  # e
        if r[i] == 46:  # .
            point = n + lead
        elif n == 0 and r[i] == 48:
            lead += 1
        else:
            s[n] = r[i]
            n += 1
        i += 1
    if r[i] == 101:
        esign = r[i + 1] == 45
        i += 2
        while r[i] != 0:
            e10 = e10 * 10 + (r[i] - 48)
            i += 1
        if esign:
            e10 = -e10
    if cython.compiled:
        PyMem_Free(r)
    exp = (n + lead if point < 0 else point) - lead - 1 + e10
    while n > 1 and s[n - 1] == 48:
        n -= 1
    if n < 17:
        digits = 0
        for i in range(n):
            digits = digits * 10 + (s[i] - 48)
        if on_bound(m, q, frac == 0 and biased > 1, digits, exp - n + 1):
            ryu, exp = _shortest_exclusive(x, 53, -1074, 17)
            return layout(neg, ryu.encode(), len(ryu), exp, 15)
    return layout(neg, s, n, exp, 15)


def on_bound(m: int, q: int, narrow_below: bool, digits: int, k: int) -> bool:
    """Whether ``digits * 10**k`` lies exactly half an ulp from ``m * 2**q`` (a quarter below,
    where ``narrow_below``: at a power of two, the gap below is half as wide).

    Python's repr accepts such a bound (it reads back as the value under round-half-even);
    PostgreSQL's Ryu is built with STRICTLY_SHORTEST 0 and never does, so it prints longer (or
    other) digits there. The bounds are ``(2m +- 1) * 2**(q-1)`` and ``(4m - 1) * 2**(q-2)``,
    and :func:`same` compares them without big integers."""
    return (same(digits, k, 2 * m + 1, q - 1) or same(digits, k, 2 * m - 1, q - 1)
            or (narrow_below and same(digits, k, 4 * m - 1, q - 2)))


def same(d: int, k: int, b: int, t: int) -> bool:
    """Whether ``d * 10**k == b * 2**t`` (``d`` > 0, ``b`` odd): then their parts prime to 10,
    their powers of 2 and their powers of 5 are equal."""
    i = j = j2 = 0
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


def float4_text(x: float) -> str:
    """float4out for a value that is exactly a float32: shortest digits that read back as it."""
    s = _special(x)
    if s is not None:
        return s
    digits, exp = _shortest_exclusive(abs(x), 24, -149, 9)
    return layout(x < 0, digits.encode(), len(digits), exp, 6)


def _shortest_exclusive(x: float, mant_bits: int, min_exp: int,
                        max_digits: int) -> tuple[str, int]:
    """Ryu's digits for ``x`` (> 0) in a binary format of ``mant_bits`` significant bits.

    The shortest decimal strictly inside the rounding interval (half an ulp each side, a
    quarter below at a power of two; bounds never accepted, as PostgreSQL builds Ryu),
    nearest to ``x``, ties to an even last digit. Exact rational arithmetic: this is the slow
    path (float4 values, and the rare doubles where Python's repr sits on a bound).
    """
    value = Fraction(x)
    e = math.frexp(x)[1]
    ulp = Fraction(2) ** max(e - mant_bits, min_exp)
    n, d = x.as_integer_ratio()
    power_of_two = n & (n - 1) == 0 and d & (d - 1) == 0
    lo = value - (ulp / 4 if power_of_two and e - mant_bits > min_exp else ulp / 2)
    hi = value + ulp / 2
    k = math.floor(math.log10(x))
    if Fraction(10) ** k > value:
        k -= 1
    elif Fraction(10) ** (k + 1) <= value:
        k += 1
    for p in range(1, max_digits + 1):
        scale = Fraction(10) ** (k - p + 1)
        q = value / scale
        a = q.numerator // q.denominator
        best: int | None = None
        for cand in (a, a + 1):
            v = cand * scale
            if not lo < v < hi:
                continue
            if best is None:
                best = cand
            else:
                d_best = abs(best * scale - value)
                d_cand = abs(v - value)
                if d_cand < d_best or (d_cand == d_best and cand % 2 == 0):
                    best = cand
        if best is not None:
            digits = str(best)
            exp = k + (len(digits) - p)  # a round-up to the next power of ten
            return digits.rstrip("0") or "0", exp
    raise AssertionError("every float has a representation in max_digits")  # pragma: no cover


def unpack_float4(b: bytes) -> float:
    return _F4.unpack(b)[0]


def unpack_float8(b: bytes) -> float:
    return _F8.unpack(b)[0]


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    float8_datum_text = native.twin(float8_datum_text, "cdclake.tuples._floats")
