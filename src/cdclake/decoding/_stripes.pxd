# cython: language_level=3
"""A parallel decode's share (:mod:`cdclake.decoding.stripes`) asked inline by the compiled
twins that ask it once per change (the decoder and the replayer of every worker): the
``Shares`` fields read at their slots and the stripe computed in C, where Python's integer
arithmetic and attribute lookups cost more than the rest of the question."""

from cdclake.wal._slots cimport get, offset, put


cdef struct ShareSlots:
    Py_ssize_t bits, index, jobs, last


cdef inline ShareSlots share_slots(type shares) except *:
    """Where a ``Shares`` holds its fields: read once, at the importing module's import."""
    cdef ShareSlots at
    at.bits = offset(shares, "bits")
    at.index = offset(shares, "index")
    at.jobs = offset(shares, "jobs")
    at.last = offset(shares, "last")
    return at


cdef inline bint says_yes(object share, type shares, ShareSlots *at, object top,
                          object lsn) except -1:
    """``share(top, lsn)``; for a ``Shares`` (the class ``shares``, its slots at ``at``)
    computed here, with its ``last`` set as ``Shares.__call__`` sets it."""
    if type(share) is not shares:
        return share(top, lsn)
    cdef unsigned long long stripe = (<unsigned long long> lsn) >> <unsigned int> get(
        share, at.bits)
    if ((<unsigned long long> top + stripe) % <unsigned long long> get(share, at.jobs)
            != <unsigned long long> get(share, at.index)):
        return False
    put(share, at.last, lsn)
    return True
