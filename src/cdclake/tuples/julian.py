# cython: cdivision=True
"""Julian day numbers and calendar dates: PostgreSQL's own routines (datetime.c's j2date and
date2j), valid from 4714-11-24 BC on, where Python's ``datetime`` stops at years 1..9999.

This file is compiled as itself too, as ``cdclake.tuples._julian`` (Cython's pure-Python
mode; ``_julian.pxd`` adds the C types): the compiled date and timestamp texts
(``datetimes.py``) and ``cdclake waldump``'s commit times call its :func:`j2date` as C, once
per value, so the calendar is written here only. Compiled, it divides as C does, as
datetime.c does (the comment above): for a Julian day (0 is 4714-11-24 BC) every operand is
positive, where C's and Python's division agree.
"""

from __future__ import annotations


def j2date(jd: int) -> tuple[int, int, int]:
    """datetime.c j2date: Julian day -> (year, month, day); year <= 0 means BC."""
    julian = jd + 32044
    quad = julian // 146097
    extra = (julian - quad * 146097) * 4 + 3
    julian += 60 + quad * 3 + extra // 146097
    quad = julian // 1461
    julian -= quad * 1461
    y = julian * 4 // 1461
    julian = ((julian + 305) % 365 if y != 0 else (julian + 306) % 366) + 123
    y += quad * 4
    quad = julian * 2141 // 65536
    return y - 4800, (quad + 10) % 12 + 1, julian - 7834 * quad // 256


def date2j(year: int, month: int, day: int) -> int:
    """datetime.c date2j (C integer division: the operands are positive here)."""
    if month > 2:
        month += 1
        year += 4800
    else:
        month += 13
        year += 4799
    century = year // 100
    julian = year * 365 - 32167
    julian += year // 4 - century + century // 4
    julian += 7834 * month // 256 + day
    return julian
