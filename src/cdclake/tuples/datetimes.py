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
valid from 4714-11-24 BC on, not Python's datetime (which stops at years 1..9999).
"""

from __future__ import annotations

import re
import struct
from datetime import date

from cdclake import native
from cdclake.tuples.julian import date2j, j2date
from cdclake.tuples.untypeable import NotTypeable

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
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_TIMETZ = struct.Struct("<qi")
_INTERVAL = struct.Struct("<qii")


class DateTimeRangeError(ValueError):
    """Text that is not a date/time output (a valid value without an Arrow value raises
    NotTypeable instead)."""


#: date.toordinal() of 2000-01-01, and the ordinals Python's date can represent
_ORDINAL_2000 = 730120
_MAX_ORDINAL = 3652059  # 9999-12-31
_fromordinal = date.fromordinal
#: "HH:MM:" for every minute of a day (and of hour 24, for time '24:00:00'), "SS" for seconds
_HHMM = tuple(f"{h:02d}:{m:02d}:" for h in range(25) for m in range(60))
_SS = tuple(f"{s:02d}" for s in range(60))


def _ymd(jd: int) -> tuple[str, bool]:
    """ISO date text of a Julian day, and whether it is BC (shown as ' BC' by the caller)."""
    o = jd - POSTGRES_EPOCH_JDATE + _ORDINAL_2000
    if 0 < o <= _MAX_ORDINAL:  # the same proleptic Gregorian calendar, in C
        return _fromordinal(o).isoformat(), False
    y, m, d = j2date(jd)
    bc = y <= 0
    return f"{y if not bc else 1 - y:04d}-{m:02d}-{d:02d}", bc


def _fraction(usec: int) -> str:
    """AppendSeconds' fractional part: '.ffffff' without trailing zeros, '' for zero."""
    if usec == 0:
        return ""
    return "." + f"{usec:06d}".rstrip("0")


def _hms(t: int) -> str:
    """HH:MM:SS[.f] for 0 <= t (µs); hours may exceed 23 (time '24:00:00')."""
    secs, usec = divmod(t, USECS_PER_SEC)
    mins, sec = divmod(secs, 60)
    if mins < 1500:
        s = _HHMM[mins] + _SS[sec]
    else:
        hour, minute = divmod(mins, 60)
        s = f"{hour:02d}:{minute:02d}:{sec:02d}"
    if usec:
        return s + "." + f"{usec:06d}".rstrip("0")
    return s


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
    d = _I32.unpack(b)[0]
    if d == INT32_MAX:
        return "infinity"
    if d == INT32_MIN:
        return "-infinity"
    s, bc = _ymd(d + POSTGRES_EPOCH_JDATE)
    return s + " BC" if bc else s


_python_date_text = date_text  # the reference, which the compiled twin falls back to
date_text = native.twin(date_text, "cdclake.tuples._datetimes")


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
    return _hms(_I64.unpack(b)[0])


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
    return _hms(t) + tz_text(zone)


# -- timestamp / timestamptz ------------------------------------------------------------------


def _timestamp_text(t: int, suffix: str) -> str:
    if t == INT64_MAX:
        return "infinity"
    if t == INT64_MIN:
        return "-infinity"
    days, usec_of_day = divmod(t, USECS_PER_DAY)
    ymd, bc = _ymd(days + POSTGRES_EPOCH_JDATE)
    s = f"{ymd} {_hms(usec_of_day)}{suffix}"
    return s + " BC" if bc else s


def timestamp_text(b: bytes) -> str:
    return _timestamp_text(_I64.unpack(b)[0], "")


def timestamptz_text(b: bytes) -> str:
    """With TimeZone UTC the zone always prints as +00."""
    return _timestamp_text(_I64.unpack(b)[0], "+00")


# the references, which the compiled twins fall back to
_python_timestamp_text = timestamp_text
_python_timestamptz_text = timestamptz_text
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
            f"timestamp {_timestamp_text(t, '')} is beyond the range of a microsecond "
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


def _ctrunc_divmod(a: int, b: int) -> tuple[int, int]:
    """C's truncating division and remainder (the sign of the remainder follows ``a``)."""
    q = abs(a) // b
    if a < 0:
        q = -q
    return q, a - q * b


def interval_text(b: bytes) -> str:
    """EncodeInterval, IntervalStyle postgres: '1 year 2 mons -3 days +04:05:06.5'."""
    time, day, month = _INTERVAL.unpack(b)
    if month == INT32_MAX and day == INT32_MAX and time == INT64_MAX:
        return "infinity"
    if month == INT32_MIN and day == INT32_MIN and time == INT64_MIN:
        return "-infinity"
    year, mon = _ctrunc_divmod(month, 12)
    hour, rest = _ctrunc_divmod(time, USECS_PER_HOUR)
    minute, rest = _ctrunc_divmod(rest, USECS_PER_MINUTE)
    sec, fsec = _ctrunc_divmod(rest, USECS_PER_SEC)
    parts: list[str] = []
    is_before = False
    for value, unit in ((year, "year"), (mon, "mon"), (day, "day")):
        if value == 0:
            continue
        plus = "+" if is_before and value > 0 else ""
        parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
        is_before = value < 0
    if not parts or hour or minute or sec or fsec:
        minus = hour < 0 or minute < 0 or sec < 0 or fsec < 0
        sign = "-" if minus else ("+" if is_before else "")
        parts.append(f"{sign}{abs(hour):02d}:{abs(minute):02d}:{abs(sec):02d}"
                     f"{_fraction(abs(fsec))}")
    return " ".join(parts)


_python_interval_text = interval_text
interval_text = native.twin(interval_text, "cdclake.tuples._datetimes")
