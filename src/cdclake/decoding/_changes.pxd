# cython: language_level=3
"""C types for ``changes.py`` compiled as ``cdclake.decoding._changes`` (Cython's pure-Python
mode: the compiled reorder buffer counts a change with its ``change_size``), and where a
Change and its WalTuples hold their fields (inlined into the Arrow plugin, which reads them):
read once at import from the classes' member descriptors (``wal/_slots.pxd``)."""

from cdclake.wal._slots cimport offset

cdef Py_ssize_t CHANGE_OVERHEAD


cpdef Py_ssize_t change_size(change) except -1


cdef struct ChangeSlots:
    Py_ssize_t action, lsn, seq, locator, old, new, clear_toast, origin, payload
    Py_ssize_t t_infomask2, t_infomask, t_hoff, t_data  # the WalTuple's


cdef inline ChangeSlots change_slots(type change, type tup) except *:
    """The slots of ``change`` (:class:`~cdclake.decoding.changes.Change`) and ``tup``
    (:class:`~cdclake.wal.record.WalTuple`)."""
    cdef ChangeSlots s
    s.action = offset(change, "action")
    s.lsn = offset(change, "lsn")
    s.seq = offset(change, "seq")
    s.locator = offset(change, "locator")
    s.old = offset(change, "old")
    s.new = offset(change, "new")
    s.clear_toast = offset(change, "clear_toast")
    s.origin = offset(change, "origin")
    s.payload = offset(change, "payload")
    s.t_infomask2 = offset(tup, "infomask2")
    s.t_infomask = offset(tup, "infomask")
    s.t_hoff = offset(tup, "t_hoff")
    s.t_data = offset(tup, "data")
    return s
