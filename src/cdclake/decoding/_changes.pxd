# cython: language_level=3
"""C types for ``changes.py`` compiled as ``cdclake.decoding._changes`` (Cython's pure-Python
mode: the compiled reorder buffer counts a change with its ``change_size``)."""

cdef Py_ssize_t CHANGE_OVERHEAD


cpdef Py_ssize_t change_size(change) except -1
