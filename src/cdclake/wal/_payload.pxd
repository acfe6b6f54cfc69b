# cython: language_level=3
"""C access to the bytes of a record or of one of its payloads, which the compiled twins of
every layer read (inlined into each): a payload is ``bytes`` or a C-contiguous memoryview of
a segment, whose buffer is read without acquiring it again (the caller keeps it alive)."""

from cpython.buffer cimport Py_buffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


cdef extern from "Python.h":
    Py_buffer *PyMemoryView_GET_BUFFER(object view)
    int PyBuffer_IsContiguous(const Py_buffer *view, char order)


cdef struct Bytes:
    const unsigned char *p
    Py_ssize_t n


cdef inline Bytes payload(object data):
    """The bytes of ``data``: ``bytes``, or a memoryview :func:`readable` accepts."""
    cdef Bytes b
    cdef Py_buffer *view
    if type(data) is bytes:
        b.p = <const unsigned char *> PyBytes_AS_STRING(data)
        b.n = PyBytes_GET_SIZE(data)
    else:
        view = PyMemoryView_GET_BUFFER(data)
        b.p = <const unsigned char *> view.buf
        b.n = view.len
    return b


cdef inline bint readable(object data):
    """Whether :func:`payload` can read ``data`` (the reader's payloads always are)."""
    cdef Py_buffer *view
    if type(data) is bytes:
        return True
    if type(data) is not memoryview:
        return False
    view = PyMemoryView_GET_BUFFER(data)
    return view.itemsize == 1 and PyBuffer_IsContiguous(view, b'C')
