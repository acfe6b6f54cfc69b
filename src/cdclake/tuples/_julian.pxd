# cython: language_level=3
"""C types for ``julian.py`` compiled as ``cdclake.tuples._julian`` (Cython's pure-Python
mode), and the calendar the compiled date and timestamp texts call per value (``cimport``)."""

import cython


@cython.locals(julian=cython.longlong, quad=cython.longlong, extra=cython.longlong,
               y=cython.longlong)
cpdef (long long, long long, long long) j2date(long long jd)
