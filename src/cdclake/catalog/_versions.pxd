# cython: language_level=3
"""C types for ``versions.py`` compiled as ``cdclake.catalog._versions`` (Cython's pure-Python
mode), and the lookups the compiled decoder and replayer call per change (``cimport``)."""

import cython


@cython.locals(versions=list)
cpdef object newest_version(dict by_loc, object spc, object rel, object lsn)


cpdef bint is_pg_class(object pg_class, object loc) except -1
