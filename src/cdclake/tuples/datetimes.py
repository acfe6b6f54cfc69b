# cython: boundscheck=False, wraparound=False, cdivision=True
"""date/time types on disk -> PostgreSQL's ISO text output and Arrow storage values.

Layouts (utils/date.h, datatype/timestamp.h): date int32 days since 2000-01-01; time int64 µs
since midnight; timetz int64 µs + int32 zone (seconds *west* of UTC); timestamp[tz] int64 µs
since 2000-01-01 00:00 (UTC for timestamptz); interval int64 µs, int32 days, int32 months.
±infinity are the int extremes (intervals: all three fields, PostgreSQL 17+).

Arrow storage values (what ``*_value`` return): date32 days and timestamp µs counted from
1970-01-01, time64 µs since midnight. ±infinity become DuckDB's own infinity encodings —
date ±(2**31 - 1), timestamp ±(2**63 - 1) — which no real PostgreSQL value reaches. Values
without an exact Arrow value raise :class:`~cdclake.tuples.untypeable.NotTypeable`: ``time
'24:00:00'`` (Arrow and Iceberg times stop before midnight) and timestamps from
294247-01-10 04:00:54.775807 on (past int64 µs since 1970, PostgreSQL goes to 294276 AD).
BC dates and years past 9999 are ordinary values: the arithmetic here is on integers, never
through Python's ``datetime``.

Output follows datetime.c EncodeDateOnly/EncodeTimeOnly/EncodeDateTime/EncodeInterval with
DateStyle ISO, IntervalStyle postgres and TimeZone UTC: 4-digit (or wider) years, " BC" after
everything for years <= 0, fractional seconds without trailing zeros, timestamptz "+00".
Calendar arithmetic is PostgreSQL's own Julian-day routine (:mod:`cdclake.tuples.julian`),
valid from 4714-11-24 BC on, not Python's datetime (which stops at years 1..9999); a date or
timestamp before it, or a time outside 00:00..24:00, is no value PostgreSQL writes: a
:class:`DateTimeRangeError`.

The date, timestamp and interval texts run once per value a decoder prints, so they write
into a buffer, and this file is compiled as itself (Cython's pure-Python mode,
``_datetimes.pxd``): the buffer is then a C array, and :mod:`cdclake.tuples.ints` and
:func:`~cdclake.tuples.julian.j2date` are called as C. Every division has non-negative
operands (:func:`floor_divmod`, :func:`trunc_divmod`), where C's and Python's agree.
"""

from __future__ import annotations

import re
import struct

from cdclake import native
from cdclake.tuples.julian import date2j
from cdclake.tuples.untypeable import NotTypeable

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._ints import le_int, magnitude, put_int, put_uint
    from cython.cimports.cdclake.tuples._julian import j2date
    from cython.cimports.cdclake.wal._primitives import bytes_of
else:
    from cdclake.tuples.ints import le_int, magnitude, put_int, put_uint
    from cdclake.tuples.julian import j2date
    from cdclake.wal.primitives import bytes_of

POSTGRES_EPOCH_JDATE = 2451545  #: 2000-01-01
UNIX_EPOCH_JDATE = 2440588  #: 1970-01-01
USECS_PER_SEC = 1_000_000
USECS_PER_MINUTE = 60 * USECS_PER_SEC
USECS_PER_HOUR = 60 * USECS_PER_MINUTE
USECS_PER_DAY = 24 * USECS_PER_HOUR
#: µs between the PostgreSQL and Unix epochs
EPOCH_SHIFT_USECS = (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY
EPOCH_SHIFT_DAYS = POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -INT64_MAX - 1

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_TIMETZ = struct.Struct("<qi")


class DateTimeRangeError(ValueError):
    """Text that is not a date/time output (a valid value without an Arrow value raises
    NotTypeable instead)."""


def floor_divmod(a: int, b: int) -> tuple[int, int]:
    """Python's divmod for ``b`` > 0, with non-negative operands only (C's ``/`` truncates)."""
    q = a // b if a >= 0 else -(-(a + 1) // b) - 1
    return q, a - q * b


def trunc_divmod(a: int, b: int) -> tuple[int, int]:
    """C's division for ``b`` > 0 (the remainder has the sign of ``a``), with non-negative
    operands only: as datetime.c's EncodeInterval divides."""
    if a >= 0:
        q = a // b
    else:
        c = -(a + 1)
        q = -(c // b + (c % b + 1) // b)
    return q, a - q * b


def put_ymd(buf: bytearray, o: int, jd: int) -> tuple[int, bool]:
    """Write YYYY-MM-DD (a wider year past 9999) of Julian day ``jd`` at ``buf[o]``; where it
    ends, and whether it is BC (the caller appends " BC" after everything)."""
    if jd < 0:
        raise DateTimeRangeError(f"Julian day {jd} is before 4714-11-24 BC")
    y, m, d = j2date(jd)
    bc = y <= 0
    o = put_uint(buf, o, 1 - y if bc else y, 4)
    buf[o] = 45  # -
    o = put_uint(buf, o + 1, m, 2)
    buf[o] = 45
    return put_uint(buf, o + 1, d, 2), bc


def put_hms(buf: bytearray, o: int, t: int) -> int:
    """Write HH:MM:SS[.ffffff] (no trailing zeros) of ``t`` µs (0 <= t, hours past 23 for
    time '24:00:00') at ``buf[o]``; where it ends."""
    secs = t // USECS_PER_SEC
    usec = t - secs * USECS_PER_SEC
    mins = secs // 60
    hours = mins // 60
    o = put_uint(buf, o, hours, 2)
    buf[o] = 58  # :
    o = put_uint(buf, o + 1, mins - hours * 60, 2)
    buf[o] = 58
    o = put_uint(buf, o + 1, secs - mins * 60, 2)
    return put_fraction(buf, o, usec)


def put_fraction(buf: bytearray, o: int, usec: int) -> int:
    """AppendSeconds' fractional part: '.ffffff' without trailing zeros, nothing for zero."""
    if usec == 0:
        return o
    buf[o] = 46  # .
    o = put_uint(buf, o + 1, usec, 6)
    while buf[o - 1] == 48:
        o -= 1
    return o


def put_bc(buf: bytearray, o: int) -> int:
    buf[o] = 32
    buf[o + 1] = 66  # B
    buf[o + 2] = 67  # C
    return o + 3


def datum(b: bytes, size: int, what: str) -> bytes:
    """The datum as ``bytes`` of the type's ``size``."""
    data = b if type(b) is bytes else bytes(b)
    if len(data) != size:
        raise DateTimeRangeError(f"a {what} datum takes {size} bytes, not {len(data)}")
    return data


def tz_text(tz: int) -> str:
    """EncodeTimezone: ``tz`` is seconds west of UTC; shows +HH, +HH:MM or +HH:MM:SS."""
    sign = "+" if tz <= 0 else "-"
    sec = abs(tz)
    mins, sec = divmod(sec, 60)
    hour, minute = divmod(mins, 60)
    if sec:
        return f"{sign}{hour:02d}:{minute:02d}:{sec:02d}"
    if minute:
        return f"{sign}{hour:02d}:{minute:02d}"
    return f"{sign}{hour:02d}"


# -- date -------------------------------------------------------------------------------------


def date_text(b: bytes) -> str:
    data = datum(b, 4, "date")
    d = le_int(bytes_of(data), 0, 4)
    if d == INT32_MAX:
        return "infinity"
    if d == INT32_MIN:
        return "-infinity"
    if not cython.compiled:  # compiled, a C array (_datetimes.pxd)
        out = bytearray(24)
    o, bc = put_ymd(out, 0, d + POSTGRES_EPOCH_JDATE)
    if bc:
        o = put_bc(out, o)
    return out[:o].decode("ascii")


def date_value(b: bytes) -> int:
    """Days since 1970-01-01; ±infinity -> ±(2**31 - 1)."""
    d = _I32.unpack(b)[0]
    if d == INT32_MAX:
        return INT32_MAX
    if d == INT32_MIN:
        return -INT32_MAX
    return d + EPOCH_SHIFT_DAYS


_DATE_RE = re.compile(r"^(\d{4,})-(\d\d)-(\d\d)( BC)?$")


def date_value_from_text(s: str) -> int:
    if s == "infinity":
        return INT32_MAX
    if s == "-infinity":
        return -INT32_MAX
    m = _DATE_RE.match(s)
    if m is None:
        raise DateTimeRangeError(f"not an ISO date output: {s!r}")
    year = int(m.group(1))
    if m.group(4):
        year = 1 - year
    return date2j(year, int(m.group(2)), int(m.group(3))) - UNIX_EPOCH_JDATE


# -- time / timetz ----------------------------------------------------------------------------


def time_text(b: bytes) -> str:
    return _time(_I64.unpack(b)[0])


def _time(t: int) -> str:
    if not 0 <= t <= USECS_PER_DAY:
        raise DateTimeRangeError(f"time of {t} µs is outside 00:00:00..24:00:00")
    out = bytearray(20)
    return out[:put_hms(out, 0, t)].decode("ascii")


def time_value(b: bytes) -> int:
    """µs since midnight (Arrow time64[us]); ``24:00:00`` is not typeable."""
    t = _I64.unpack(b)[0]
    if t >= USECS_PER_DAY:
        raise NotTypeable("time 24:00:00 has no Arrow/Iceberg time value")
    return t


_TIME_RE = re.compile(r"^(\d\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")


def _parse_time(s: str) -> int:
    m = _TIME_RE.match(s)
    if m is None:
        raise DateTimeRangeError(f"not a time output: {s!r}")
    frac = m.group(4) or ""
    return ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * USECS_PER_SEC \
        + int(frac.ljust(6, "0") or 0)


def time_value_from_text(s: str) -> int:
    t = _parse_time(s)
    if t >= USECS_PER_DAY:
        raise NotTypeable(f"time {s} has no Arrow/Iceberg time value")
    return t


def timetz_text(b: bytes) -> str:
    t, zone = _TIMETZ.unpack(b)
    return _time(t) + tz_text(zone)


# -- timestamp / timestamptz ------------------------------------------------------------------


def stamp_text(t: int, tz: bool) -> str:
    """EncodeDateTime of ``t`` µs since 2000-01-01, and "+00" with ``tz``."""
    if t == INT64_MAX:
        return "infinity"
    if t == INT64_MIN:
        return "-infinity"
    days, usec = floor_divmod(t, USECS_PER_DAY)
    if not cython.compiled:  # compiled, a C array (_datetimes.pxd)
        out = bytearray(40)
    o, bc = put_ymd(out, 0, days + POSTGRES_EPOCH_JDATE)
    out[o] = 32
    o = put_hms(out, o + 1, usec)
    if tz:
        out[o] = 43  # +
        out[o + 1] = 48
        out[o + 2] = 48
        o += 3
    if bc:
        o = put_bc(out, o)
    return out[:o].decode("ascii")


def timestamp_text(b: bytes) -> str:
    data = datum(b, 8, "timestamp")
    return stamp_text(le_int(bytes_of(data), 0, 8), False)


def timestamptz_text(b: bytes) -> str:
    """With TimeZone UTC the zone always prints as +00."""
    data = datum(b, 8, "timestamptz")
    return stamp_text(le_int(bytes_of(data), 0, 8), True)


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    date_text = native.twin(date_text, "cdclake.tuples._datetimes")
    timestamp_text = native.twin(timestamp_text, "cdclake.tuples._datetimes")
    timestamptz_text = native.twin(timestamptz_text, "cdclake.tuples._datetimes")


def _ts_value(t: int) -> int:
    if t == INT64_MAX:
        return INT64_MAX
    if t == INT64_MIN:
        return -INT64_MAX
    v = t + EPOCH_SHIFT_USECS
    if v >= INT64_MAX:  # INT64_MAX itself means +infinity
        raise NotTypeable(
            f"timestamp {stamp_text(t, False)} is beyond the range of a microsecond "
            "timestamp counted from 1970 (Arrow timestamp[us])")
    return v


def timestamp_value(b: bytes) -> int:
    """µs since 1970-01-01 (UTC for timestamptz); ±infinity -> ±(2**63 - 1)."""
    return _ts_value(_I64.unpack(b)[0])


_TS_RE = re.compile(
    r"^(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?)?( BC)?$")


def timestamp_value_from_text(s: str) -> int:
    """Parses timestamp and timestamptz ISO output (any zone offset) back to the value."""
    if s == "infinity":
        return INT64_MAX
    if s == "-infinity":
        return -INT64_MAX
    m = _TS_RE.match(s)
    if m is None:
        raise DateTimeRangeError(f"not an ISO timestamp output: {s!r}")
    year = int(m.group(1))
    if m.group(12):
        year = 1 - year
    jd = date2j(year, int(m.group(2)), int(m.group(3)))
    t = (jd - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY
    t += ((int(m.group(4)) * 60 + int(m.group(5))) * 60 + int(m.group(6))) * USECS_PER_SEC
    t += int((m.group(7) or "").ljust(6, "0") or 0)
    if m.group(8):
        offset = (int(m.group(9)) * 60 + int(m.group(10) or 0)) * 60 + int(m.group(11) or 0)
        t -= (offset if m.group(8) == "+" else -offset) * USECS_PER_SEC
    return _ts_value(t)


# -- interval ---------------------------------------------------------------------------------


def interval_text(b: bytes) -> str:
    """EncodeInterval, IntervalStyle postgres: '1 year 2 mons -3 days +04:05:06.5'."""
    data = datum(b, 16, "interval")
    p = bytes_of(data)
    time = le_int(p, 0, 8)
    day = le_int(p, 8, 4)
    month = le_int(p, 12, 4)
    if month == INT32_MAX and day == INT32_MAX and time == INT64_MAX:
        return "infinity"
    if month == INT32_MIN and day == INT32_MIN and time == INT64_MIN:
        return "-infinity"
    year, mon = trunc_divmod(month, 12)
    hour, rest = trunc_divmod(time, USECS_PER_HOUR)
    minute, rest = trunc_divmod(rest, USECS_PER_MINUTE)
    sec, fsec = trunc_divmod(rest, USECS_PER_SEC)
    if not cython.compiled:  # compiled, a C array (_datetimes.pxd)
        out = bytearray(96)
    o = 0
    is_before = False
    for k in range(3):
        value = year if k == 0 else mon if k == 1 else day
        if value == 0:
            continue
        if o:
            out[o] = 32
            o += 1
        if is_before and value > 0:
            out[o] = 43  # +
            o += 1
        o = put_int(out, o, value)
        unit = _UNITS[k]
        out[o] = 32
        for i in range(len(unit)):
            out[o + 1 + i] = unit[i]
        o += 1 + len(unit)
        if value != 1:
            out[o] = 115  # s
            o += 1
        is_before = value < 0
    if o == 0 or hour or minute or sec or fsec:
        if o:
            out[o] = 32
            o += 1
        if hour < 0 or minute < 0 or sec < 0 or fsec < 0:
            out[o] = 45  # -
            o += 1
        elif is_before:
            out[o] = 43  # +
            o += 1
        o = put_uint(out, o, magnitude(hour), 2)
        out[o] = 58  # :
        o = put_uint(out, o + 1, magnitude(minute), 2)
        out[o] = 58
        o = put_uint(out, o + 1, magnitude(sec), 2)
        o = put_fraction(out, o, magnitude(fsec))
    return out[:o].decode("ascii")


_UNITS = (b"year", b"mon", b"day")

if not cython.compiled:
    interval_text = native.twin(interval_text, "cdclake.tuples._datetimes")
