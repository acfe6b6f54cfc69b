"""Following pg_class rows in the WAL, for relfilenode changes no event trigger reports.

VACUUM FULL, CLUSTER and table-rewriting ALTER TABLE build a transient heap named
``pg_temp_<oid of the original>``: its pg_class row is logged as a full heap INSERT into
pg_class — the tuple in the record, or, when the record carries a full-page image of the
pg_class page, in that image at the inserted offset. At commit the original table owns the
transient heap's relfilenode (the swap itself is logged only as prefix/suffix-compressed
UPDATEs, which cannot be read without the page). So: a pg_temp insert marks the new
relfilenode as a rewrite heap (its rows are the copy, not changes: PostgreSQL skips them too,
``relrewrite``) and, when its transaction commits, the original table's current definition moves
to that relfilenode. TOAST relations created on the way are marked as TOAST.

pg_class is a mapped catalog: its own relfilenode comes from the dictionary and moves with
RELMAP records (VACUUM FULL pg_class).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID, RELKIND_TOAST, RelationVersion
from cdclake.decoding.changes import TxnInfo
from cdclake.errors import DecodingError
from cdclake.tuples import heap
from cdclake.tuples.codecs import codec_for
from cdclake.tuples.varlena import payload
from cdclake.wal.image import page_tuple, restore_page
from cdclake.wal.lsn import format_lsn
from cdclake.wal.record import WalTuple, XLogRecord
from cdclake.wal.rmgr.heap import HeapInsert
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


class PgClassTracker:
    """Reads pg_class inserts of one database out of the WAL."""

    def __init__(self, dictionary: Dictionary) -> None:
        self.dictionary = dictionary
        self._layout: tuple[RelationVersion, dict[str, int]] | None = None

    def is_pg_class(self, spc: int, rel: int) -> bool:
        loc = self.dictionary.pg_class_locator()
        return loc is not None and loc == (spc, rel)

    def relmap_update(self, upd: RelmapUpdate, lsn: int) -> None:
        """Every mapped relation is a catalog; pg_class itself is what we follow."""
        spc = upd.ts_id or self.dictionary.default_tablespace()
        for filenode in upd.mappings.values():
            self.dictionary.add_catalog_locator(spc, filenode)
        filenode = upd.mappings.get(PG_CLASS_OID)
        if filenode is not None:
            self.dictionary.set_pg_class_filenode(spc, filenode, lsn)

    def pg_class_insert(self, rec: XLogRecord, ins: HeapInsert) -> PgClassRow | None:
        tup = ins.tuple
        if tup is None:
            block = rec.block(0)
            if block is None or not block.has_image:
                raise DecodingError(
                    f"pg_class insert at {format_lsn(rec.lsn)} ({rec.segment}) carries neither "
                    "tuple data nor a page image")
            tup = page_tuple(restore_page(block), ins.offnum)
        return self._row(tup, rec)

    def _row(self, tup: WalTuple, rec: XLogRecord) -> PgClassRow | None:
        rel = self.dictionary.pg_class_relation()
        if rel is None:
            return None
        if self._layout is None or self._layout[0] is not rel:
            pos = {c.name: c.attnum - 1 for c in rel.columns if not c.dropped}
            missing = [f for f in _FIELDS if f not in pos]
            if missing:
                raise DecodingError(f"the dictionary's pg_class lacks columns {missing}")
            self._layout = (rel, pos)
        _, pos = self._layout
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
