"""The data dictionary: relation versions by relfilenode and by oid, each valid from an LSN.

It stands in for PostgreSQL's historic catalog snapshots. Versions arrive from ``cdclake.ddl``
messages in the WAL (applied when their transaction commits, never if it aborts) and from the
pg_class rows the decoder follows (rewrites). A lookup asks "what was relfilenode R at LSN L":
the newest version of R whose ``valid_from`` is at or before L. Lookups run once per change, so
the common case — the newest version applies — is a dict hit and one comparison.

Types are versioned the same way (:mod:`cdclake.catalog.types`). A type-level DDL command
changes no relation, but the relations whose columns decode through the changed type get a new
version at the message's LSN: their codecs are built once per version from the types valid at
its ``valid_from``, so a new version is what makes every cache rebuild them, at no cost per
change, and a change written before the DDL still decodes with the facts of its time.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from cdclake.catalog.model import RelationVersion, type_from_json
from cdclake.catalog.types import TypeCatalog
from cdclake.catalog.versions import insert_version, newest_version, version_at
from cdclake.errors import DecodingError
from cdclake.lsn import format_lsn

Locator = tuple[int, int]  #: (tablespace oid as WAL shows it, relfilenode)
Ctid = tuple[int, int]  #: a pg_class row's place: (block, line pointer)


@dataclass(frozen=True, slots=True)
class ClassRow:
    """The pg_class row of a followed table, or of its TOAST table (``toast``): whose it is and
    the storage it names. The dictionary keeps one per row, at the row's ctid, so that an
    UPDATE logging only the bytes that changed still says whose row it changed
    (:class:`cdclake.decoding.walclass.PgClassUpdate`)."""

    oid: int  #: the relation the row describes (a TOAST table's own oid)
    toast: bool
    tablespace: int  #: as WAL shows it
    relfilenode: int


class Dictionary:
    """Relation versions and types of one source database."""

    def __init__(self) -> None:
        #: the same object for the dictionary's whole life: output plugins keep a reference
        self.types = TypeCatalog()
        self.db_oid = 0
        self.server_version_num = 0
        self._default_tablespace = 0
        #: relation versions by relfilenode, oldest first: public because the compiled
        #: decoder asks :func:`~cdclake.catalog.versions.newest_version` of it per change
        self.by_loc: dict[Locator, list[RelationVersion]] = {}
        self._by_oid: dict[int, list[RelationVersion]] = {}
        self._catalogs: dict[Locator, str] = {}  #: catalog relfilenodes -> relkind
        self._toast: dict[Locator, int] = {}  #: TOAST relfilenodes -> LSN known from
        self._pg_class: RelationVersion | None = None
        #: pg_class's relfilenode (read per change by the compiled decoder's gate)
        self.pg_class_loc: Locator | None = None
        #: the newest transaction id (with epoch) of an authentic ``cdclake.ddl`` message
        #: applied: a signed message from a wraparound before it is a replayed copy
        #: (:func:`cdclake.catalog.signing.stale_epoch`)
        self.ddl_xid8 = 0
        #: where the followed relations' pg_class rows are: as the messages describe them,
        #: then followed through every committed UPDATE and DELETE of pg_class
        self._class_rows: dict[Ctid, ClassRow] = {}
        self._class_row_of: dict[int, Ctid] = {}  #: oid -> its row's ctid

    # -- lookups (hot path) ------------------------------------------------------------------

    def relation_for_locator(self, spc: int, relfilenode: int, lsn: int) -> RelationVersion | None:
        v = newest_version(self.by_loc, spc, relfilenode, lsn)
        if v is not None:
            return v
        versions = self.by_loc.get((spc, relfilenode))
        v = None if versions is None else version_at(versions, lsn)
        return None if v is None or v.dropped else v

    def relation_for_oid(self, oid: int, lsn: int) -> RelationVersion | None:
        versions = self._by_oid.get(oid)
        if versions is None:
            return None
        v = version_at(versions, lsn)
        return None if v is None or v.dropped else v

    def rewrite_layout(self, oid: int, lsn: int,
                       own_messages: Collection[int]) -> RelationVersion | None:
        """The definition the rows of table ``oid``'s transient heap (filled at ``lsn``) have.

        ALTER TABLE rewrites the table after changing its columns but before its event
        trigger describes it, so the first description after ``lsn`` written by the rewriting
        transaction itself (its DDL messages are at ``own_messages``; another transaction's
        may lie in between) is the one that fits; without one (REFRESH MATERIALIZED VIEW, a
        rewrite that changes no column) the definition at ``lsn`` does.
        """
        for v in self._by_oid.get(oid, ()):
            if v.valid_from > lsn and v.valid_from in own_messages and not v.dropped:
                return v
        return self.relation_for_oid(oid, lsn)

    def first_version_after(self, spc: int, relfilenode: int, lsn: int) -> RelationVersion | None:
        """The earliest version defined after ``lsn`` (rows written before their definition)."""
        versions = self.by_loc.get((spc, relfilenode), [])
        i = bisect.bisect_right([v.valid_from for v in versions], lsn)
        for v in versions[i:]:
            if not v.dropped:
                return v
        return None

    def is_catalog(self, spc: int, relfilenode: int, lsn: int) -> bool:
        """A system catalog (or its TOAST table), or a TOAST table of a user table."""
        loc = (spc, relfilenode)
        if loc in self._catalogs:
            return True
        since = self._toast.get(loc)
        return since is not None and since <= lsn

    def versions(self) -> list[RelationVersion]:
        return sorted((v for vs in self._by_oid.values() for v in vs),
                      key=lambda v: (v.valid_from, v.oid))

    def default_tablespace(self) -> int:
        return self._default_tablespace

    def pg_class_relation(self) -> RelationVersion | None:
        return self._pg_class

    def class_row(self, ctid: Ctid) -> ClassRow | None:
        """The followed relation's pg_class row at ``ctid``, if any."""
        return self._class_rows.get(ctid)

    # -- updates -------------------------------------------------------------------------------

    def add_version(self, v: RelationVersion) -> None:
        if v.relfilenode:
            insert_version(self.by_loc.setdefault((v.tablespace, v.relfilenode), []), v)
            if v.toast_relfilenode:
                self._toast.setdefault((v.tablespace, v.toast_relfilenode), v.valid_from)
        insert_version(self._by_oid.setdefault(v.oid, []), v)

    def add_rewrite_heap(self, spc: int, relfilenode: int, oid: int, original: int,
                         lsn: int) -> None:
        """A transient heap (``pg_temp_<original>``): its rows are a copy, not changes."""
        base = self.relation_for_oid(original, lsn)
        if base is None:
            base = RelationVersion(oid=oid, db_oid=self.db_oid, tablespace=spc, relfilenode=0,
                                   schema="pg_toast", name=f"pg_temp_{original}",
                                   qualified=f"pg_temp_{original}", relkind="r",
                                   persistence="p", replident="n", columns=())
        marker = dataclasses.replace(base, oid=oid, tablespace=spc, relfilenode=relfilenode,
                                     name=f"pg_temp_{original}", valid_from=lsn,
                                     rewrite_of=original, toast_relfilenode=0)
        insert_version(self.by_loc.setdefault((spc, relfilenode), []), marker)

    def add_catalog_locator(self, spc: int, relfilenode: int) -> None:
        self._catalogs.setdefault((spc, relfilenode), "r")

    def add_toast_locator(self, spc: int, relfilenode: int, lsn: int) -> None:
        self._toast.setdefault((spc, relfilenode), lsn)

    def move_class_row(self, old: Ctid, new: Ctid | None, row: ClassRow | None) -> None:
        """A committed UPDATE moved the pg_class row at ``old`` to ``new`` (None: a DELETE
        removed it); ``row`` is what it says there, None if no followed relation's."""
        gone = self._class_rows.pop(old, None)
        if gone is not None and self._class_row_of.get(gone.oid) == old:
            del self._class_row_of[gone.oid]
        if new is not None and row is not None:
            self._track(new, row)

    def _track(self, ctid: Ctid, row: ClassRow) -> None:
        before = self._class_row_of.get(row.oid)
        if before is not None and before != ctid:
            self._class_rows.pop(before, None)
        other = self._class_rows.get(ctid)
        if other is not None and other.oid != row.oid:
            self._class_row_of.pop(other.oid, None)
        self._class_rows[ctid] = row
        self._class_row_of[row.oid] = ctid

    def set_pg_class_filenode(self, spc: int, filenode: int, lsn: int) -> None:
        """A RELMAP update moved pg_class (VACUUM FULL pg_class): its rows are elsewhere now,
        so the places known of them say nothing any more."""
        self.pg_class_loc = (spc or self._default_tablespace, filenode)
        self._catalogs[self.pg_class_loc] = "r"
        self._class_rows.clear()
        self._class_row_of.clear()

    def drop(self, oid: int, lsn: int) -> None:
        current = self.relation_for_oid(oid, lsn)
        if current is None:
            return
        tomb = dataclasses.replace(current, valid_from=lsn, dropped=True)
        self.add_version(tomb)

    def apply_message(self, lsn: int, payload: bytes | str,
                      commit_lsn: int | None = None) -> list[RelationVersion]:
        """Apply one ``cdclake.ddl`` message emitted at ``lsn``; the versions it adds.

        ``commit_lsn`` is where the message's transaction committed, if known: see
        :meth:`_follow_types` for the one case that needs it.
        """
        try:
            msg = json.loads(payload)
            kind = msg["kind"]
            types = [type_from_json(t) for t in msg.get("types", ())]
            # messages of an older install name no changed types: all of theirs are news
            news = (None if kind == "dictionary" or "changed_types" not in msg
                    else {int(o) for o in msg["changed_types"]})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DecodingError(f"cdclake.ddl message at {format_lsn(lsn)} is not valid: "
                                f"{exc}") from exc
        changed: set[int] = set()
        for info in types:
            if news is None or info.oid in news:
                if self.types.put(info, lsn):
                    changed.add(info.oid)
            else:
                self.types.learn(info, lsn)
        if kind == "drop":
            for r in msg.get("relations", ()):
                self.drop(int(r["oid"]), lsn)
            return self._follow_types(changed, lsn, set(), commit_lsn)
        if kind == "dictionary":
            self._apply_full(msg, lsn)
        elif kind != "relations":
            raise DecodingError(f"cdclake.ddl message at {format_lsn(lsn)} has unknown kind "
                                f"{kind!r}")
        added = []
        for r in msg.get("relations", ()):
            v = dataclasses.replace(RelationVersion.from_json(r), valid_from=lsn)
            v = _keep_missing_text(self.relation_for_oid(v.oid, lsn), v)
            self.add_version(v)
            self._track_rows(r, v)
            added.append(v)
        added += self._follow_types(changed, lsn, {v.oid for v in added}, commit_lsn)
        return added

    def _follow_types(self, changed: set[int], lsn: int, described: set[int],
                      commit_lsn: int | None) -> list[RelationVersion]:
        """New versions, at ``lsn``, of the relations whose columns decode through a changed
        type (the ones the message itself ``described`` have theirs already).

        A relation may already have a version after ``lsn``: a transaction whose DDL message
        came later in the WAL committed first. That version's codecs may be built already,
        with the facts from before this change, so the relation gets one more version where
        the change became visible to everyone: ``commit_lsn``.
        """
        if not changed:
            return []
        memo: dict[int, bool] = {}
        memo_later: dict[int, bool] = {}
        added = []
        for oid, versions in self._by_oid.items():
            if oid in described:
                continue
            newest = versions[-1]
            current = version_at(versions, lsn)
            if current is not None and self._uses(current, changed, lsn, memo):
                v = dataclasses.replace(current, valid_from=lsn)
                self.add_version(v)
                added.append(v)
            if (commit_lsn is not None and lsn < newest.valid_from < commit_lsn
                    and self._uses(newest, changed, commit_lsn, memo_later)):
                v = dataclasses.replace(newest, valid_from=commit_lsn)
                self.add_version(v)
                added.append(v)
        return added

    def _uses(self, v: RelationVersion, changed: set[int], lsn: int,
              memo: dict[int, bool]) -> bool:
        """Whether a live version has a column decoding through a ``changed`` type."""
        return not v.dropped and any(self.types.depends_on(c.type_oid, changed, lsn, memo)
                                     for c in v.columns if not c.dropped)

    def _track_rows(self, r: dict[str, Any], v: RelationVersion) -> None:
        """Where the pg_class rows of a described relation and of its TOAST table are (an
        install before cdclake described them does not say)."""
        ctid, toast_ctid = r.get("ctid"), r.get("toast_ctid")
        if ctid:
            self._track(_ctid(ctid), ClassRow(v.oid, False, v.tablespace, v.relfilenode))
        if toast_ctid and v.toast_oid:
            self._track(_ctid(toast_ctid),
                        ClassRow(v.toast_oid, True, v.tablespace, v.toast_relfilenode))

    def _apply_full(self, msg: dict[str, Any], lsn: int) -> None:
        self._class_rows.clear()  # the full dictionary says where every followed row is
        self._class_row_of.clear()
        self.db_oid = int(msg["db_oid"])
        self._default_tablespace = int(msg["default_tablespace"])
        self.server_version_num = int(msg.get("server_version_num", 0))
        for spc, filenode, relkind in msg.get("catalogs", ()):
            self._catalogs[(int(spc), int(filenode))] = relkind
        pg_class = msg.get("pg_class")
        if pg_class:
            v = dataclasses.replace(RelationVersion.from_json(pg_class), valid_from=lsn)
            self._pg_class = v
            if self.pg_class_loc is None:
                self.pg_class_loc = (v.tablespace, v.relfilenode)

    # -- persistence ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "db_oid": self.db_oid,
            "server_version_num": self.server_version_num,
            "default_tablespace": self._default_tablespace,
            "types": self.types.to_json(),
            "versions": [v.to_json() for v in self.versions()],
            "loc_versions": [[spc, rel, [v.to_json() for v in vs if v.rewrite_of]]
                             for (spc, rel), vs in sorted(self.by_loc.items())
                             if any(v.rewrite_of for v in vs)],
            "catalogs": [[spc, rel, kind] for (spc, rel), kind in self._catalogs.items()],
            "toast": [[spc, rel, lsn] for (spc, rel), lsn in self._toast.items()],
            "pg_class": self._pg_class.to_json() if self._pg_class else None,
            "pg_class_locator": list(self.pg_class_loc) if self.pg_class_loc else None,
            "ddl_xid8": self.ddl_xid8,
            "class_rows": [[*ctid, r.oid, r.toast, r.tablespace, r.relfilenode]
                           for ctid, r in sorted(self._class_rows.items())],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Dictionary:
        self = cls()
        self.db_oid = d.get("db_oid", 0)
        self.server_version_num = d.get("server_version_num", 0)
        self._default_tablespace = d.get("default_tablespace", 0)
        self.types.load(d.get("types", ()))
        for v in d.get("versions", ()):
            self.add_version(RelationVersion.from_json(v))
        for spc, rel, markers in d.get("loc_versions", ()):
            for m in markers:
                insert_version(self.by_loc.setdefault((spc, rel), []), RelationVersion.from_json(m))
        self._catalogs = {(spc, rel): kind for spc, rel, kind in d.get("catalogs", ())}
        self._toast = {(spc, rel): lsn for spc, rel, lsn in d.get("toast", ())}
        if d.get("pg_class"):
            self._pg_class = RelationVersion.from_json(d["pg_class"])
        if d.get("pg_class_locator"):
            self.pg_class_loc = tuple(d["pg_class_locator"])  # type: ignore[assignment]
        self.ddl_xid8 = int(d.get("ddl_xid8", 0))
        for block, offnum, oid, toast, spc, rel in d.get("class_rows", ()):
            self._track((block, offnum), ClassRow(oid, toast, spc, rel))
        return self


def _ctid(text: str) -> Ctid:
    """``(block,offset)``, a ctid as PostgreSQL prints it."""
    block, offnum = text.strip("()").split(",")
    return int(block), int(offnum)


def _keep_missing_text(prev: RelationVersion | None, v: RelationVersion) -> RelationVersion:
    """``v`` with each column's ``missing_text`` kept from ``prev`` where a table rewrite
    cleared attmissingval since (VACUUM FULL, CLUSTER): the decoder reads ``has_missing``,
    which stays as the catalog says, but rows a mirror stored before the ADD COLUMN still read
    that value (docs/lake.md)."""
    if prev is None:
        return v
    cols = list(v.columns)
    changed = False
    for i, c in enumerate(cols):
        if c.has_missing or c.missing_text is not None or c.dropped or c.attnum > len(prev.columns):
            continue
        p = prev.columns[c.attnum - 1]
        if p.missing_text is not None and not p.dropped and (p.type_oid, p.typmod) == (
                c.type_oid, c.typmod):
            cols[i] = dataclasses.replace(c, missing_text=p.missing_text)
            changed = True
    return dataclasses.replace(v, columns=tuple(cols)) if changed else v

