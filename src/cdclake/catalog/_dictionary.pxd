# cython: language_level=3
"""The common case of ``Dictionary.relation_for_locator`` for the compiled twins that ask it
once per change (inlined into each): the newest version of the relation applies."""


cdef inline object newest_version(dict by_loc, object spc, object rel, object lsn):
    """The newest version of relfilenode (``spc``, ``rel``) in ``by_loc`` (a Dictionary's
    ``by_loc``) when it applies at ``lsn`` and is not a tombstone; None where the dictionary
    itself must answer (no version, an older one, a dropped relation)."""
    versions = by_loc.get((spc, rel))
    if versions is None:
        return None
    v = (<list> versions)[len(<list> versions) - 1]
    if v.valid_from <= lsn and not v.dropped:
        return v
    return None
