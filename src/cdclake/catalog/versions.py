"""A relation's versions, oldest first: which one applies at an LSN; and which relfilenode is
pg_class's.

The dictionary keeps each relfilenode's (and each oid's) versions in a list sorted by
``valid_from``; a version applies from its LSN until the next one's. The lookup runs once per
change, and its common case — the newest version applies — is :func:`newest_version`. The
other question the decoder asks the dictionary of every heap change is whether it touches
pg_class (:func:`is_pg_class`: the tracker follows those rows). The compiled decoder and
replayer call these same functions, compiled from this file as ``cdclake.catalog._versions``
(Cython's pure-Python mode: ``_versions.pxd`` adds the C types), so the rules are written here
only.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdclake.catalog.model import RelationVersion
    from cdclake.wal.record import RelFileLocator

    Locator = tuple[int, int]


def newest_version(by_loc: dict[Locator, list[RelationVersion]], spc: int, rel: int,
                   lsn: int) -> RelationVersion | None:
    """The newest version of relfilenode (``spc``, ``rel``) in ``by_loc`` when it applies at
    ``lsn`` and is not a tombstone; None where the dictionary must look further (no version,
    an older one applies, a dropped relation)."""
    versions = by_loc.get((spc, rel))
    if versions is None:
        return None
    v = versions[len(versions) - 1]
    return v if v.valid_from <= lsn and not v.dropped else None


def is_pg_class(pg_class: Locator | None, loc: RelFileLocator) -> bool:
    """Whether ``loc`` is pg_class's relfilenode, ``pg_class`` being where the dictionary has
    it (``Dictionary.pg_class_loc``; None before it is known)."""
    return pg_class is not None and pg_class[1] == loc.rel and pg_class[0] == loc.spc


def version_at(versions: list[RelationVersion], lsn: int) -> RelationVersion | None:
    """The version of ``versions`` that applies at ``lsn``: the newest from at or before it."""
    i = bisect.bisect_right([x.valid_from for x in versions], lsn)
    return versions[i - 1] if i else None


def insert_version(versions: list[RelationVersion], v: RelationVersion) -> None:
    """Keep ``versions`` sorted by valid_from; a later add at the same LSN wins."""
    if not versions or versions[-1].valid_from <= v.valid_from:
        versions.append(v)
        return
    i = bisect.bisect_right([x.valid_from for x in versions], v.valid_from)
    versions.insert(i, v)
