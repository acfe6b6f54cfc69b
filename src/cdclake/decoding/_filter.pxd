# cython: language_level=3
"""C types for ``filter.py`` compiled as ``cdclake.decoding._filter`` (Cython's pure-Python
mode): the compiled decoder asks gates 3-4 of every change with its ``drop_locator``."""

import cython

from cdclake._identity cimport id


@cython.locals(verdicts=dict, known=tuple)
cpdef bint drop_locator(filt, loc, lsn) except -1
