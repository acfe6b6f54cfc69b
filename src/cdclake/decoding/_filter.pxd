# cython: language_level=3
"""C types for ``filter.py`` compiled as ``cdclake.decoding._filter`` (Cython's pure-Python
mode): the compiled decoder asks gate 2 of every change with its ``origin_ok``, gates 3-4 with
its ``drop_locator``."""

import cython

from cdclake._identity cimport id


@cython.locals(verdicts=dict, known=tuple)
cpdef bint drop_locator(filt, loc, lsn) except -1


cpdef bint origin_ok(filt, origin) except -1
