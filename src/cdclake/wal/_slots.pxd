# cython: language_level=3
"""Setting and reading the fields of an instance of a ``__slots__`` class
(``@dataclass(slots=True)``) from C (inlined into each compiled module that builds or reads
one): ``obj.field = value`` on a Python class looks the name up through the type and calls the
slot's member descriptor, which costs more than building the record itself; the descriptor
only stores the pointer at a fixed offset in the instance, and :func:`offset` reads that
offset from the descriptor (CPython's ``PyMemberDef``) once. A class whose field is not such a
slot fails at import, where the offset is read."""

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    object PyType_GenericNew(PyTypeObject *cls, PyObject *args, PyObject *kwds)
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member


cdef extern from "structmember.h":
    int T_OBJECT_EX


cdef inline Py_ssize_t offset(type cls, str name) except -1:
    """Where instances of ``cls`` hold their slot ``name`` (a ``__slots__`` member)."""
    d = cls.__dict__[name]
    if type(d).__name__ != "member_descriptor":
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    cdef PyMemberDef *m = (<PyMemberDescrObject *> d).d_member
    if m.type != T_OBJECT_EX:
        raise TypeError(f"{cls.__name__}.{name} is not an object slot")
    return m.offset


cdef inline object blank(type cls):
    """``cls.__new__(cls)`` for a class without a ``__new__`` of its own: its slots empty."""
    return PyType_GenericNew(<PyTypeObject *> cls, NULL, NULL)


cdef inline void put(object obj, Py_ssize_t at, object value):
    """``obj.<the slot at offset at> = value``, as the member descriptor does it."""
    cdef PyObject **slot = <PyObject **> (<char *> <PyObject *> obj + at)
    cdef PyObject *old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject *> value
    Py_XDECREF(old)


cdef inline object get(object obj, Py_ssize_t at):
    """``obj.<the slot at offset at>``, as the member descriptor reads it: the caller has
    checked ``obj``'s type, so the offset is that type's own (a record's fields are read
    several times per record, each a lookup through the type otherwise)."""
    cdef PyObject *value = (<PyObject **> (<char *> <PyObject *> obj + at))[0]
    if value == NULL:
        raise AttributeError(f"slot at offset {at} of {type(obj).__name__} is not set")
    return <object> value


cdef inline object field_of(object obj, type cls, Py_ssize_t at, str name):
    """``obj.<name>``: an instance of ``cls`` itself read at its slot ``at`` (``offset(cls,
    name)``), anything else by name (``wal/primitives.py``'s ``field_of``, the Python build's)."""
    if type(obj) is cls:
        return get(obj, at)
    return getattr(obj, name)
