# cython: language_level=3
"""``id`` for the modules compiled as themselves (Cython's pure-Python mode) that key a memo
by an object's identity once per change: CPython's ``id`` is the object's address, made here
without a call of the builtin (``cimport``-ed by their ``.pxd``, it stands for ``id`` in their
compiled build)."""

from cpython.long cimport PyLong_FromVoidPtr


cdef inline object id(object o):
    """The object's address as a Python int: what the builtin ``id`` returns."""
    return PyLong_FromVoidPtr(<void *> o)
