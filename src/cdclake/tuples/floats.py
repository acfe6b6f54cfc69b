"""float4/float8 text output as PostgreSQL prints it with extra_float_digits >= 1 (the default).

PostgreSQL uses Ryu (common/d2s.c, f2s.c) built with STRICTLY_SHORTEST 0: the shortest decimal
strictly inside the value's rounding interval (bounds never accepted), nearest to the value,
printed in fixed notation when the decimal exponent is in [-4, 15) ([-4, 6) for float4) and as
``d.ddde+XX`` otherwise (at least two exponent digits); ``NaN``, ``Infinity``, ``-Infinity``,
``-0``. Python's ``repr`` of a double picks the same digits except when it lands exactly on a
rounding bound (Python accepts bounds with an even significand); that case is detected exactly
and recomputed. float4 has no Python repr, so its digits are searched with exact arithmetic.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from cdclake import native

_F4 = struct.Struct("<f")
_F8 = struct.Struct("<d")
_U32 = struct.Struct("<I")


def _layout(negative: bool, digits: str, exp: int, fixed_below: int = 15) -> str:
    """Ryu's to_chars: ``digits`` (no leading/trailing zeros) times 10**(exp - len + 1).

    Fixed notation for -4 <= exp < fixed_below (15 for float8, 6 for float4, as printf's
    %g would with the types' DBL_DIG/FLT_DIG), scientific otherwise."""
    n = len(digits)
    sign = "-" if negative else ""
    if -4 <= exp < fixed_below:
        if exp < 0:
            return f"{sign}0.{'0' * (-exp - 1)}{digits}"
        if exp + 1 >= n:
            return sign + digits + "0" * (exp + 1 - n)
        return f"{sign}{digits[:exp + 1]}.{digits[exp + 1:]}"
    mant = digits if n == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"


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
    """float8out: shortest round-trip digits in PostgreSQL's layout."""
    r = repr(x)
    if "e" in r or r in ("nan", "inf", "-inf"):
        special = _special(x)
        if special is not None:
            return special
        neg = r[0] == "-"
        mant, _, e = r.lstrip("-").partition("e")
        ip, _, fp = mant.partition(".")
        digits = (ip + fp).rstrip("0")
        exp = int(e) + len(ip) - 1
    else:
        neg = r[0] == "-"
        body = r[1:] if neg else r
        ip, _, fp = body.partition(".")
        if fp == "0":
            if ip == "0":
                return "-0" if neg else "0"
            if len(ip) < 16:
                # integral and below 1e15: exact, hence not on a rounding boundary
                return r[:-2]
            fp = ""
        if ip == "0":
            stripped = fp.lstrip("0")
            exp = -(len(fp) - len(stripped)) - 1
            digits = stripped.rstrip("0")
        else:
            exp = len(ip) - 1
            digits = (ip + fp).rstrip("0")
    if len(digits) < 17 and _on_double_boundary(abs(x), digits, exp):
        digits, exp = _shortest_exclusive(abs(x), 53, -1074, 17)
    return _layout(neg, digits, exp)


def _on_double_boundary(x: float, digits: str, exp: int) -> bool:
    """Whether Python's repr chose a decimal exactly half an ulp from ``x``.

    Python accepts such a bound (it reads back as ``x`` under round-half-even) but
    PostgreSQL's Ryu is built with STRICTLY_SHORTEST 0 and never does, so it prints a
    longer (or different) digit string there.
    """
    n, d = x.as_integer_ratio()
    e = math.frexp(x)[1]
    ulp_exp = max(e - 53, -1074)
    k = exp - len(digits) + 1
    a = max(0, 2 - ulp_exp)  # scale so that a quarter ulp is an integer
    b = max(0, -k)
    big_x = (n << a) // d * 10**b
    big_c = int(digits) * 10 ** (k + b) << a
    if big_c == big_x:
        return False
    half = (1 << (ulp_exp - 1 + a)) * 10**b
    if big_c in (big_x + half, big_x - half):
        return True
    # at a power of two the gap below is half as wide
    return n & (n - 1) == 0 and d & (d - 1) == 0 and big_c == big_x - (half >> 1)


def float4_text(x: float) -> str:
    """float4out for a value that is exactly a float32: shortest digits that read back as it."""
    s = _special(x)
    if s is not None:
        return s
    digits, exp = _shortest_exclusive(abs(x), 24, -149, 9)
    return _layout(x < 0, digits, exp, 6)


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


def float8_datum_text(p: bytes) -> str:
    """float8out of a float8 column's 8-byte datum."""
    return float8_text(unpack_float8(p))


#: the reference, which the compiled twin falls back to for what it does not take
_python_float8_datum_text = float8_datum_text
float8_datum_text = native.twin(float8_datum_text, "cdclake.tuples._floats")
