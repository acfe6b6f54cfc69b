# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of :mod:`cdclake.tuples.datetimes`' ``date_text``, ``timestamp_text``,
``timestamptz_text`` and ``interval_text`` (see :mod:`cdclake.native`): the text written into
a C buffer, the calendar by :mod:`cdclake.tuples.julian`'s j2date, called as C.

Years 1 to 9999 AD are done here, and every finite interval; anything else (infinity, BC,
five-digit years, a datum of the wrong size) goes to the Python reference, which returns its
text or raises its error.
"""

from cdclake.tuples._bytes cimport le_int
from cdclake.tuples._julian cimport j2date
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdio cimport snprintf
from libc.stdlib cimport llabs

from cdclake.tuples import datetimes as _reference

cdef long long POSTGRES_EPOCH_JDATE = 2451545
cdef long long USECS_PER_DAY = 86400000000
cdef long long JD_0001_01_01 = 1721426
cdef long long JD_10000_01_01 = 5373484
cdef long long USECS_PER_SEC = 1000000
cdef long long USECS_PER_MINUTE = 60 * USECS_PER_SEC
cdef long long USECS_PER_HOUR = 60 * USECS_PER_MINUTE


cdef inline void _digits(char *cp, long long v, int n) noexcept:
    """``v`` as ``n`` decimal digits, zero-padded."""
    cdef int i
    for i in range(n - 1, -1, -1):
        cp[i] = 48 + <int> (v % 10)
        v //= 10


cdef inline int _ymd(long long jd, char *cp) noexcept:
    """Write YYYY-MM-DD for Julian day ``jd`` (j2date); 10, or -1 outside 0001..9999 AD."""
    if jd < JD_0001_01_01 or jd >= JD_10000_01_01:
        return -1
    cdef long long y, m, d
    y, m, d = j2date(jd)
    _digits(cp, y, 4)
    cp[4] = 45
    _digits(cp + 5, m, 2)
    cp[7] = 45
    _digits(cp + 8, d, 2)
    return 10


cdef object _timestamp(object b, bint tz):
    if type(b) is not bytes or PyBytes_GET_SIZE(b) != 8:
        return None
    cdef long long t = le_int(<const unsigned char *> PyBytes_AS_STRING(b), 8)
    cdef long long days = t // USECS_PER_DAY
    cdef long long usec = t - days * USECS_PER_DAY
    if usec < 0:  # C division truncates; the calendar wants the floor
        days -= 1
        usec += USECS_PER_DAY
    cdef char buf[40]
    cdef int n = _ymd(days + POSTGRES_EPOCH_JDATE, buf)
    if n < 0:
        return None
    cdef long long secs = usec // 1000000
    usec -= secs * 1000000
    buf[10] = 32
    _digits(buf + 11, secs // 3600, 2)
    buf[13] = 58
    _digits(buf + 14, (secs // 60) % 60, 2)
    buf[16] = 58
    _digits(buf + 17, secs % 60, 2)
    n = 19
    if usec:
        buf[19] = 46
        _digits(buf + 20, usec, 6)
        n = 26
        while buf[n - 1] == 48:
            n -= 1
    if tz:
        buf[n] = 43
        buf[n + 1] = 48
        buf[n + 2] = 48
        n += 3
    return PyUnicode_DecodeASCII(buf, n, NULL)


def timestamp_text(b):
    """See ``datetimes.timestamp_text``."""
    s = _timestamp(b, False)
    return _reference._python_timestamp_text(b) if s is None else s


def timestamptz_text(b):
    """See ``datetimes.timestamptz_text``."""
    s = _timestamp(b, True)
    return _reference._python_timestamptz_text(b) if s is None else s


def date_text(b):
    """See ``datetimes.date_text``."""
    cdef char buf[10]
    if type(b) is bytes and PyBytes_GET_SIZE(b) == 4:
        if _ymd(le_int(<const unsigned char *> PyBytes_AS_STRING(b), 4) + POSTGRES_EPOCH_JDATE,
                buf) == 10:
            return PyUnicode_DecodeASCII(buf, 10, NULL)
    return _reference._python_date_text(b)


def interval_text(b):
    """See ``datetimes.interval_text`` (C's division truncates, as EncodeInterval's does)."""
    if type(b) is not bytes or PyBytes_GET_SIZE(b) != 16:
        return _reference._python_interval_text(b)
    cdef const unsigned char *p = <const unsigned char *> PyBytes_AS_STRING(b)
    cdef long long time = le_int(p, 8), day = le_int(p + 8, 4), month = le_int(p + 12, 4)
    if (month == 2147483647 and day == 2147483647 and time == 9223372036854775807) or (
            month == -2147483648 and day == -2147483648 and time == -9223372036854775807 - 1):
        return _reference._python_interval_text(b)  # +-infinity
    cdef long long fields[3]
    cdef const char *units[3]
    fields[0] = month / 12
    fields[1] = month - fields[0] * 12
    fields[2] = day
    units[0] = b"year"
    units[1] = b"mon"
    units[2] = b"day"
    cdef long long hour = time / USECS_PER_HOUR
    cdef long long rest = time - hour * USECS_PER_HOUR
    cdef long long minute = rest / USECS_PER_MINUTE
    rest -= minute * USECS_PER_MINUTE
    cdef long long sec = rest / USECS_PER_SEC
    cdef long long fsec = rest - sec * USECS_PER_SEC
    cdef char buf[160]
    cdef int n = 0, i
    cdef bint is_before = False
    cdef long long value
    for i in range(3):
        value = fields[i]
        if value == 0:
            continue
        if n:
            buf[n] = 32
            n += 1
        n += snprintf(buf + n, 40, "%s%lld %s%s", <const char *> (b"+" if is_before and value > 0
                                                                  else b""),
                      value, units[i], <const char *> (b"" if value == 1 else b"s"))
        is_before = value < 0
    if n == 0 or hour or minute or sec or fsec:
        if n:
            buf[n] = 32
            n += 1
        n += snprintf(buf + n, 60, "%s%02lld:%02lld:%02lld",
                      <const char *> (b"-" if hour < 0 or minute < 0 or sec < 0 or fsec < 0
                                      else b"+" if is_before else b""),
                      llabs(hour), llabs(minute), llabs(sec))
        if fsec:
            buf[n] = 46
            _digits(buf + n + 1, llabs(fsec), 6)
            n += 7
            while buf[n - 1] == 48:
                n -= 1
    return PyUnicode_DecodeASCII(buf, n, NULL)
