# cython: language_level=3
"""C types for ``datetimes.py`` compiled as ``cdclake.tuples._datetimes`` (Cython's
pure-Python mode): the date, timestamp and interval texts written into C arrays
(``cdclake.native``)."""

import cython

cdef long long POSTGRES_EPOCH_JDATE, USECS_PER_SEC, USECS_PER_MINUTE, USECS_PER_HOUR
cdef long long USECS_PER_DAY, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX


@cython.locals(q=cython.longlong)
cdef (long long, long long) floor_divmod(long long a, long long b) noexcept


@cython.locals(q=cython.longlong, c=cython.longlong)
cdef (long long, long long) trunc_divmod(long long a, long long b) noexcept


@cython.locals(y=cython.longlong, m=cython.longlong, d=cython.longlong, bc=bint)
cdef (Py_ssize_t, bint) put_ymd(char *buf, Py_ssize_t o, long long jd) except *


@cython.locals(secs=cython.longlong, usec=cython.longlong, mins=cython.longlong,
               hours=cython.longlong)
cdef Py_ssize_t put_hms(char *buf, Py_ssize_t o, long long t) noexcept


cdef Py_ssize_t put_fraction(char *buf, Py_ssize_t o, long long usec) noexcept


cdef Py_ssize_t put_bc(char *buf, Py_ssize_t o) noexcept


@cython.locals(data=bytes)
cdef bytes datum(b, Py_ssize_t size, str what)


@cython.locals(data=bytes, d=cython.longlong, out=cython.char[24], o=Py_ssize_t, bc=bint)
cpdef str date_text(b)


@cython.locals(days=cython.longlong, usec=cython.longlong, out=cython.char[40], o=Py_ssize_t,
               bc=bint)
cpdef str stamp_text(long long t, bint tz)


@cython.locals(data=bytes)
cpdef str timestamp_text(b)


@cython.locals(data=bytes)
cpdef str timestamptz_text(b)


@cython.locals(data=bytes, p=cython.p_const_uchar, time=cython.longlong, day=cython.longlong,
               month=cython.longlong, year=cython.longlong, mon=cython.longlong,
               hour=cython.longlong, rest=cython.longlong, minute=cython.longlong,
               sec=cython.longlong, fsec=cython.longlong, out=cython.char[96], o=Py_ssize_t,
               is_before=bint, k=int, value=cython.longlong, unit=bytes, i=Py_ssize_t)
cpdef str interval_text(b)
