"""The filtering gates that run before buffering, cheapest first (docs/architecture.md).

Gate 1 (database OID) is a comparison the decoder does inline. This module holds the others:
gate 2, the replication origin (``origin=none`` keeps only locally originated changes); gate 3,
the tables a stream publishes (issue: publications and row filters come with pgoutput); gate 4,
the relation kind — catalogs, TOAST deletions, unlogged and temporary relations never reach the
buffer. A gate that cannot decide yet (the relation is not in the dictionary because the
transaction creating it has not committed) lets the change through; commit processing decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdclake import native
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion
from cdclake.wal.record import RelFileLocator

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.catalog._versions import newest_version
else:
    from cdclake.catalog.versions import newest_version

#: relation versions whose verdict :class:`Filter` remembers (then it starts again)
VERDICTS = 4096


@dataclass
class Filter:
    dictionary: Dictionary
    #: origin=none: drop changes that carry a replication origin (came from another node)
    local_only: bool = False
    #: gate 3: qualified names ("schema.table", unquoted) to keep; empty keeps every table
    tables: frozenset[str] = field(default_factory=frozenset)
    #: gate 3 too: qualified names never kept, whatever ``tables`` says
    exclude: frozenset[str] = field(default_factory=frozenset)
    #: gates 3-4's verdict (drop?) per relation version, by the version's id, the version
    #: kept beside it so the id stays its own: asked of every change, decided once per
    #: version (:func:`drop_locator`).
    verdicts: dict[int, tuple[RelationVersion, bool]] = field(default_factory=dict,
                                                              repr=False, compare=False)

    def origin_ok(self, origin: int) -> bool:
        """Gate 2 (:func:`origin_ok`)."""
        return origin_ok(self, origin)

    def drop_locator(self, loc: RelFileLocator, lsn: int) -> bool:
        """Gates 3-4 at decode time: True only when the relation is known and not wanted
        (:func:`drop_locator`)."""
        return drop_locator(self, loc, lsn)

    def keeps_table(self, schema: str, name: str) -> bool:
        """Gate 3 by name: also what commit processing asks of relations decided late."""
        qualified = f"{schema}.{name}"
        return (not self.tables or qualified in self.tables) and qualified not in self.exclude


def origin_ok(filt: Filter, origin: int) -> bool:
    """Gate 2, asked of every change: kept unless it carries a replication origin (it came
    from another node) and ``filt`` keeps local changes only (``origin = none``)."""
    return origin == 0 or not filt.local_only


def drop_locator(filt: Filter, loc: RelFileLocator, lsn: int) -> bool:
    """``Filter.drop_locator``, asked of every change: a function of the module, compiled
    with it as ``cdclake.decoding._filter`` (``_filter.pxd``), which the compiled decoder
    calls as C. The verdict of the relation version that applies is remembered by the
    version's id; the common case, the dictionary's newest version applies, is found without
    a call."""
    d = filt.dictionary
    v = newest_version(d.by_loc, loc.spc, loc.rel, lsn) if type(d) is Dictionary else None
    if v is None:
        v = d.relation_for_locator(loc.spc, loc.rel, lsn)
        if v is None:
            return d.is_catalog(loc.spc, loc.rel, lsn)
    verdicts = filt.verdicts
    known = verdicts.get(id(v))
    if known is None or known[0] is not v:
        if len(verdicts) >= VERDICTS:
            verdicts.clear()
        known = verdicts[id(v)] = (
            v, not v.is_user_table or not filt.keeps_table(v.schema, v.name))
    return known[1]


Filter.drop_locator = native.twin(  # type: ignore[method-assign]
    Filter.drop_locator, "cdclake.decoding._filter")
