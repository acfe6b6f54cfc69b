"""Following pg_class rows in the WAL, for relfilenode changes no event trigger reports.

VACUUM FULL, CLUSTER and table-rewriting ALTER TABLE build a transient heap named
``pg_temp_<oid of the original>``: its pg_class row is logged as a full heap INSERT into
pg_class — the tuple in the record, or, when the record carries a full-page image of the
pg_class page, in that image at the inserted offset. At commit the original table owns the
transient heap's relfilenode. So: a pg_temp insert marks the new relfilenode as a rewrite heap
(its rows are the copy, not changes: PostgreSQL skips them too, ``relrewrite``) and, when its
transaction commits, the original table's current definition moves to that relfilenode. TOAST
relations created on the way are marked as TOAST.

TRUNCATE (and the swap of a rewrite) gives a table new storage by an UPDATE of its pg_class
row, and the table's owner may drop or disable the trigger that would describe the result. The
UPDATE names the row it replaces by its ctid; when both versions are on one page
(and the record carries no image of it) it logs only the bytes between the prefix and the
suffix the two versions share (``log_heap_update``), so not the row's oid. The dictionary
knows where each followed relation's row is (the messages say where, and every committed
UPDATE and DELETE of pg_class moves or removes it: :meth:`Dictionary.move_class_row`), so the
ctid says whose row it is; the new relfilenode is the logged bytes over the old one's (a
relfilenode changes with fixed-width fields only, so the row keeps its length and the old
bytes keep their place). An UPDATE that shows its whole row (the page's image, or the row on
another page) says its oid itself. A place is as its message's transaction saw it: the
install's full dictionary locks no table, so a row another transaction moves while the install
runs, committing first, has its old place recorded, and its compressed UPDATEs are not
followed (the table's next change stops decoding, naming the relfilenode) until a message
describes the table again.

pg_class is a mapped catalog: its own relfilenode comes from the dictionary and moves with
RELMAP records (VACUUM FULL pg_class).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import ClassVar

from cdclake.catalog.dictionary import ClassRow, Ctid, Dictionary
from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID, RELKIND_TOAST, RelationVersion
from cdclake.catalog.versions import is_pg_class
from cdclake.decoding.changes import TxnInfo
from cdclake.errors import DecodingError
from cdclake.lsn import format_lsn
from cdclake.tuples import heap
from cdclake.tuples.codecs import codec_for
from cdclake.tuples.varlena import payload
from cdclake.wal.image import page_tuple, restore_page
from cdclake.wal.record import SIZEOF_HEAP_TUPLE_HEADER, RelFileLocator, WalTuple, XLogRecord
from cdclake.wal.rmgr.heap import HeapDelete, HeapInsert, HeapUpdate
from cdclake.wal.rmgr.relmap import RelmapUpdate

PG_CLASS_OID = 1259
_PG_TEMP = re.compile(r"^pg_temp_(\d+)$")
_FIELDS = ("oid", "relname", "relfilenode", "reltablespace", "relkind", "relpersistence")


@dataclass(frozen=True, slots=True)
class PgClassRow:
    """The parts of an inserted pg_class row that say what a new relfilenode is."""

    oid: int
    relname: str
    relfilenode: int
    tablespace: int  #: as WAL shows it (the database default when pg_class says 0)
    relkind: str
    persistence: str

    #: applied after the transaction's messages: the rewritten table's definition as of the
    #: commit moves to the new relfilenode (see ``Replayer.apply_catalog``)
    in_order: ClassVar[bool] = False

    def apply(self, dictionary: Dictionary, lsn: int, info: TxnInfo) -> None:
        """Runs when the inserting transaction commits (aborted rewrites never apply)."""
        m = _PG_TEMP.match(self.relname)
        if m is not None and self.relkind != RELKIND_TOAST:
            original = int(m.group(1))
            if original < FIRST_NORMAL_OBJECT_ID:
                # A catalog rewritten: its new storage is a catalog too (mapped catalogs show
                # relfilenode 0 here; RELMAP records give theirs).
                if self.relfilenode:
                    dictionary.add_catalog_locator(self.tablespace, self.relfilenode)
                return
            dictionary.add_rewrite_heap(self.tablespace, self.relfilenode, self.oid, original,
                                        lsn)
            current = dictionary.relation_for_oid(original, info.final_lsn)
            if (current is not None and not current.dropped and current.relfilenode
                    and current.relfilenode != self.relfilenode):
                dictionary.add_version(dataclasses.replace(
                    current, relfilenode=self.relfilenode, tablespace=self.tablespace,
                    valid_from=info.final_lsn))
        elif self.relkind == RELKIND_TOAST:
            dictionary.add_toast_locator(self.tablespace, self.relfilenode, lsn)


@dataclass(frozen=True, slots=True)
class PgClassUpdate:
    """A pg_class row replaced by an UPDATE, whose new version is at ``new``, or removed by a
    DELETE (``new`` None); what the new version says: the whole ``row`` when the record shows
    it, else ``filenode``, the bytes of its relfilenode the record logs (None: the old row's
    byte)."""

    old: Ctid
    new: Ctid | None
    row: PgClassRow | None = None
    filenode: tuple[int | None, ...] = ()
    #: applied where it is among the transaction's messages: a message describes the
    #: relation as it is after the changes before it, a relation created, truncated, then
    #: described in one transaction among them
    in_order: ClassVar[bool] = True

    def apply(self, dictionary: Dictionary, lsn: int, info: TxnInfo) -> None:
        """Runs when the transaction commits (a rolled-back one never moved the row): the row
        moves, and a table whose row names new storage is read there from ``lsn`` on."""
        now = self._now(dictionary, dictionary.class_row(self.old), lsn)
        dictionary.move_class_row(self.old, self.new, now)
        if now is None:
            return
        if now.toast:
            dictionary.add_toast_locator(now.tablespace, now.relfilenode, lsn)
            return
        current = dictionary.relation_for_oid(now.oid, lsn)
        if (current is not None and now.relfilenode
                and (current.tablespace, current.relfilenode) != (now.tablespace,
                                                                   now.relfilenode)):
            dictionary.add_version(dataclasses.replace(
                current, tablespace=now.tablespace, relfilenode=now.relfilenode, valid_from=lsn))

    def _now(self, dictionary: Dictionary, was: ClassRow | None, lsn: int) -> ClassRow | None:
        """The new version of a followed relation's row, or of a TOAST table's (None: no
        such row, or it is gone)."""
        row = self.row
        if self.new is None:
            return None
        if row is None:
            if was is None:
                return None  # an index's, a sequence's, a catalog's row...
            old = was.relfilenode.to_bytes(4, "little")
            return dataclasses.replace(was, relfilenode=int.from_bytes(
                bytes(o if b is None else b for b, o in zip(self.filenode, old, strict=True)),
                "little"))
        toast = row.relkind == RELKIND_TOAST
        if not toast and dictionary.relation_for_oid(row.oid, lsn) is None:
            return None
        return ClassRow(row.oid, toast, row.tablespace, row.relfilenode)


class PgClassTracker:
    """Reads pg_class inserts, updates and deletes of one database out of the WAL."""

    def __init__(self, dictionary: Dictionary) -> None:
        self.dictionary = dictionary
        #: pg_class's version, its columns' positions, and relfilenode's offset in a row
        self._layout: tuple[RelationVersion, dict[str, int], int] | None = None

    def is_pg_class(self, loc: RelFileLocator) -> bool:
        return is_pg_class(self.dictionary.pg_class_loc, loc)

    def relmap_update(self, upd: RelmapUpdate, lsn: int) -> None:
        """Every mapped relation is a catalog; pg_class itself is what we follow."""
        spc = upd.ts_id or self.dictionary.default_tablespace()
        for filenode in upd.mappings.values():
            self.dictionary.add_catalog_locator(spc, filenode)
        filenode = upd.mappings.get(PG_CLASS_OID)
        if filenode is not None:
            self.dictionary.set_pg_class_filenode(spc, filenode, lsn)

    def pg_class_insert(self, rec: XLogRecord, ins: HeapInsert) -> PgClassRow | None:
        rel = self.dictionary.pg_class_relation()
        if rel is None:
            return None
        return self._row(rel, _new_tuple(rec, ins.tuple, ins.offnum, "insert"), rec)

    def pg_class_change(self, rec: XLogRecord,
                        change: HeapUpdate | HeapDelete) -> PgClassUpdate | None:
        """An UPDATE or DELETE of a pg_class row: where its new version is, and what it says
        as far as the record shows (the module's docstring)."""
        rel = self.dictionary.pg_class_relation()
        if rel is None:
            return None
        if isinstance(change, HeapDelete):
            return PgClassUpdate((change.blkno, change.offnum), None)
        old_page = rec.block(1)  # the old version's page, when not the new one's
        old = (change.blkno if old_page is None else old_page.blkno, change.old_offnum)
        new = (change.blkno, change.new_offnum)
        tup = _new_tuple(rec, change.new_tuple, change.new_offnum, "update")
        if not change.prefix_len and not change.suffix_len:
            return PgClassUpdate(old, new, row=self._row(rel, tup, rec))
        # the bytes after the prefix, up to the suffix, follow the null bitmap
        logged = tup.data[tup.t_hoff - SIZEOF_HEAP_TUPLE_HEADER:]
        start = self._positions(rel)[1] - change.prefix_len
        return PgClassUpdate(old, new, filenode=tuple(
            logged[i] if 0 <= i < len(logged) else None for i in range(start, start + 4)))

    def _positions(self, rel: RelationVersion) -> tuple[dict[str, int], int]:
        """pg_class's columns by name, and where relfilenode starts in a row's data (every
        column before it has a fixed width and is never null)."""
        if self._layout is None or self._layout[0] is not rel:
            pos = {c.name: c.attnum - 1 for c in rel.columns if not c.dropped}
            missing = [f for f in _FIELDS if f not in pos]
            if missing:
                raise DecodingError(f"the dictionary's pg_class lacks columns {missing}")
            off = 0
            for c in rel.columns[:pos["relfilenode"]]:
                if c.attlen <= 0:
                    raise DecodingError(f"the dictionary's pg_class has column {c.name} of "
                                        "variable width before relfilenode")
                off = _align(off, c.attalign) + c.attlen
            off = _align(off, rel.columns[pos["relfilenode"]].attalign)
            self._layout = (rel, pos, off)
        return self._layout[1], self._layout[2]

    def _row(self, rel: RelationVersion, tup: WalTuple, rec: XLogRecord) -> PgClassRow:
        pos = self._positions(rel)[0]
        datums = heap.deform(tup, rel.columns)
        types = self.dictionary.types

        def text(name: str) -> str:
            col = rel.columns[pos[name]]
            raw = datums[pos[name]]
            assert isinstance(raw, bytes)
            value = payload(raw) if col.attlen == -1 else raw
            return codec_for(col.type_oid, col.typmod, types, column=name).text(value)

        spc = int(text("reltablespace")) or self.dictionary.default_tablespace()
        return PgClassRow(int(text("oid")), text("relname"), int(text("relfilenode")), spc,
                          text("relkind"), text("relpersistence"))


def _align(off: int, attalign: str) -> int:
    mask = heap.ALIGN_MASK[attalign]
    return (off + mask) & ~mask


def _new_tuple(rec: XLogRecord, tup: WalTuple | None, offnum: int, what: str) -> WalTuple:
    """The row a pg_class insert or update wrote: in the record, or, when the record carries
    an image of the page instead (a catalog's rows are not logically logged), in that."""
    if tup is not None:
        return tup
    block = rec.block(0)
    if block is None or not block.has_image:
        raise DecodingError(f"pg_class {what} at {format_lsn(rec.lsn)} ({rec.segment}) carries "
                            "neither tuple data nor a page image")
    return page_tuple(restore_page(block), offnum)
