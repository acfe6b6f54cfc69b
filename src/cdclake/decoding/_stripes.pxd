# cython: language_level=3
"""A parallel decode's share (:mod:`cdclake.decoding.stripes`) asked inline by the compiled
twins that ask it once per change (the decoder and the replayer of every worker)."""


cdef inline bint says_yes(object share, type shares, object top, object lsn) except -1:
    """``share(top, lsn)``; for a ``Shares`` (the class ``shares``) computed here, with its
    ``last`` set as ``Shares.__call__`` sets it."""
    if type(share) is not shares:
        return share(top, lsn)
    if (top + (lsn >> share.bits)) % share.jobs != share.index:
        return False
    share.last = lsn
    return True
