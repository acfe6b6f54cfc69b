"""The dictionary's types, versioned by LSN like its relations.

A type changes without any relation changing (ALTER TYPE ... ADD VALUE / RENAME VALUE /
RENAME / SET SCHEMA, ALTER DOMAIN, composite attributes), and a change decoded before that
point in the WAL must still print as it did then: test_decoding reads each change with the
catalog as of that change. So every TypeInfo is kept with the LSN it is valid from, and a
codec is built from the view :meth:`TypeCatalog.at` gives for its relation version's LSN.

The catalog itself is a ``Mapping`` of the newest facts, which is what code that does not care
about history (pg_class rows, the output plugins' type names of the newest version) reads.
Lookups by LSN only happen when a relation version's codecs are built, never per change.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from cdclake.catalog.model import TypeInfo, type_from_json, type_to_json


class TypeCatalog(Mapping[int, TypeInfo]):
    """pg_type facts by oid: the newest as a mapping, every version by LSN."""

    def __init__(self) -> None:
        self._newest: dict[int, TypeInfo] = {}
        #: oid -> (LSNs ascending, the TypeInfo valid from each)
        self._history: dict[int, tuple[list[int], list[TypeInfo]]] = {}
        #: oids whose only version was learnt (:meth:`learn`), not written by type DDL
        self._learnt: set[int] = set()

    # -- Mapping (the newest facts) ----------------------------------------------------------

    def __getitem__(self, oid: int) -> TypeInfo:
        return self._newest[oid]

    def get(self, oid: int, default: Any = None) -> Any:  # type: ignore[override]
        return self._newest.get(oid, default)

    def __contains__(self, oid: object) -> bool:
        return oid in self._newest

    def __iter__(self) -> Iterator[int]:
        return iter(self._newest)

    def __len__(self) -> int:
        return len(self._newest)

    # -- versions ------------------------------------------------------------------------------

    def at(self, lsn: int) -> Mapping[int, TypeInfo]:
        """The facts valid at ``lsn``: what a relation version valid from there decodes with."""
        return _TypesAt(self, lsn)

    def version_at(self, oid: int, lsn: int) -> TypeInfo | None:
        """The version of ``oid`` valid at ``lsn``; the earliest known one when the dictionary
        only learnt of the type later (a column cannot use a type before it exists, so the
        first facts known are the best ones)."""
        h = self._history.get(oid)
        if h is None:
            return None
        lsns, infos = h
        if lsns[-1] <= lsn:
            return infos[-1]
        i = bisect.bisect_right(lsns, lsn)
        return infos[i - 1] if i else infos[0]

    def put(self, info: TypeInfo, lsn: int) -> bool:
        """Facts a type-level DDL command wrote at ``lsn``; True if they changed the type."""
        h = self._history.get(info.oid)
        if h is None:
            self._history[info.oid] = ([lsn], [info])
            self._newest[info.oid] = info
            return False  # nothing decoded so far can have used it
        if info.oid in self._learnt:
            self._learnt.discard(info.oid)
            if lsn < h[0][0]:
                # The facts learnt at a later LSN came from a transaction that committed
                # before this change did and could not see it: they describe the type from
                # before this change, so they are no version after it.
                self._history[info.oid] = ([lsn], [info])
                self._newest[info.oid] = info
                return h[1][0] != info
        if self.version_at(info.oid, lsn) == info:
            return False
        lsns, infos = h
        i = bisect.bisect_right(lsns, lsn)
        if i and lsns[i - 1] == lsn:  # a later message at the same LSN wins
            infos[i - 1] = info
        else:
            lsns.insert(i, lsn)
            infos.insert(i, info)
        self._newest[info.oid] = infos[-1]
        return True

    def learn(self, info: TypeInfo, lsn: int) -> None:
        """Facts that only came along with a relation's columns: taken if the type is new.

        They may predate a type change that committed before them (the message was written
        by a transaction that could not see it yet), so they never replace known facts.
        """
        if info.oid not in self._history:
            self._history[info.oid] = ([lsn], [info])
            self._newest[info.oid] = info
            self._learnt.add(info.oid)

    def depends_on(self, oid: int, changed: set[int], lsn: int,
                   memo: dict[int, bool]) -> bool:
        """Whether a column of type ``oid`` decodes through any of the ``changed`` types (at
        ``lsn``): itself, its array element, domain base, range subtype, composite attributes."""
        known = memo.get(oid)
        if known is not None:
            return known
        memo[oid] = False  # composites cannot contain themselves; this stops any cycle
        found = oid in changed
        if not found:
            info = self.version_at(oid, lsn)
            if info is not None:
                found = any(self.depends_on(d, changed, lsn, memo)
                            for d in info.dependencies())
        memo[oid] = found
        return found

    # -- persistence ---------------------------------------------------------------------------

    def to_json(self) -> list[dict[str, Any]]:
        """Every version, ordered by oid then LSN (the same dictionary gives the same JSON)."""
        out = []
        for oid in sorted(self._history):
            lsns, infos = self._history[oid]
            for lsn, info in zip(lsns, infos, strict=True):
                row = {**type_to_json(info), "valid_from": lsn}
                if oid in self._learnt:
                    row["learnt"] = True
                out.append(row)
        return out

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        """Rows of :meth:`to_json` (or, from older dictionaries, plain types: valid from 0)."""
        for row in rows:
            info = type_from_json(row)
            lsn = int(row.get("valid_from", 0))
            h = self._history.setdefault(info.oid, ([], []))
            i = bisect.bisect_right(h[0], lsn)
            h[0].insert(i, lsn)
            h[1].insert(i, info)
            self._newest[info.oid] = h[1][-1]
            if row.get("learnt"):
                self._learnt.add(info.oid)


class _TypesAt(Mapping[int, TypeInfo]):
    """A read-only view of a TypeCatalog at one LSN (built per relation version, not per row)."""

    __slots__ = ("_catalog", "_lsn")

    def __init__(self, catalog: TypeCatalog, lsn: int) -> None:
        self._catalog = catalog
        self._lsn = lsn

    def __getitem__(self, oid: int) -> TypeInfo:
        info = self._catalog.version_at(oid, self._lsn)
        if info is None:
            raise KeyError(oid)
        return info

    def get(self, oid: int, default: Any = None) -> Any:  # type: ignore[override]
        info = self._catalog.version_at(oid, self._lsn)
        return default if info is None else info

    def __iter__(self) -> Iterator[int]:
        return iter(self._catalog)

    def __len__(self) -> int:
        return len(self._catalog)


def enum_labels(type_oid: int, types: Mapping[int, TypeInfo]) -> dict[int, str] | None:
    """The labels (pg_enum oid -> label) a column of ``type_oid`` holds: an enum, a domain
    over one, or an array of either (domains and arrays nest); None for any other type.

    The lake keys a column's values by these oids, so that ``ALTER TYPE ... RENAME VALUE``
    renames the values a mirror stored under the old label too, as the source shows them.
    """
    info = types.get(type_oid)
    for _ in range(16):  # domains over arrays over domains: a few levels at most
        if info is None:
            return None
        if info.typtype == "e":
            return dict(info.enum_labels)
        nxt = info.base if info.typtype == "d" else info.element if info.typcategory == "A" else 0
        info = types.get(nxt) if nxt else None
    return None
