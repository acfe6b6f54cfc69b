"""The resource-manager table: what decoding does with each kind of WAL record (rmgrlist.h).

PostgreSQL keeps one table of resource managers (``access/rmgrlist.h``) giving each its id, its
name, how its record types are named (``rm_identify``) and how logical decoding handles its
records (``rm_decode``). This module is that table for cdclake, and everything that has to
agree with the decoder reads it:

* :class:`cdclake.decoding.decode.Decoder` takes each record through :func:`process`, which
  hands it to the handler the table names (a list indexed by rmgr id, built once per
  decoder);
* the Spark job's scan classifies records with :func:`route_class`, whose per-rmgr classes
  say which records decoding reads at all and which change one transaction only, to find the
  large transactions it splits among partitions (:mod:`cdclake.spark.routing`);
* ``cdclake waldump`` names rmgrs and record types with :func:`identify`.

Routing classes: ``IGNORE`` (decoding never reads it), ``ALL`` (every decoder needs it: the
fate of transactions, running-xacts, the dictionary), ``TXN`` (a change of one transaction)
and ``CATALOG`` (a heap record of a system relation, which may be a pg_class row the catalog
tracker follows).

One fact does not fit a per-record class: a subtransaction names its top-level xid only on its
first WAL record, whatever that record is (PostgreSQL's ``LogicalDecodingProcessRecord`` reads
it from every record, decoded or not; so does :func:`process`). A ``SELECT ... FOR
UPDATE`` right after a ``SAVEPOINT`` makes that a heap LOCK record, which decoding otherwise
ignores. :func:`memberships` lists every such fact a record states, for the Spark job to
collect before its partitions decode.

Compiled as itself (Cython's pure-Python mode, ``_rmgrs.pxd``): :func:`decodable` is a
walk of the reader whose sieve routes each record from what the walk tells it, without a
record object for those a decoder passes over; :func:`process` is ``Decoder.process`` in
both builds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from cdclake import native
from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID
from cdclake.wal.record import (
    RM_BRIN_ID,
    RM_BTREE_ID,
    RM_CLOG_ID,
    RM_COMMIT_TS_ID,
    RM_DBASE_ID,
    RM_GENERIC_ID,
    RM_GIN_ID,
    RM_GIST_ID,
    RM_HASH_ID,
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_MULTIXACT_ID,
    RM_RELMAP_ID,
    RM_REPLORIGIN_ID,
    RM_SEQ_ID,
    RM_SMGR_ID,
    RM_SPGIST_ID,
    RM_STANDBY_ID,
    RM_TBLSPC_ID,
    RM_XACT_ID,
    RM_XLOG_ID,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, heap2, logicalmsg, relmap, standby, xact
from cdclake.wal.rmgr.heap import (
    XLH_DELETE_IS_SUPER,
    XLH_INSERT_IS_SPECULATIVE,
    XLH_INSERT_ON_TOAST_RELATION,
    XLOG_HEAP_DELETE,
    XLOG_HEAP_HOT_UPDATE,
    XLOG_HEAP_INSERT,
    XLOG_HEAP_OPMASK,
    XLOG_HEAP_TRUNCATE,
    XLOG_HEAP_UPDATE,
)
from cdclake.wal.rmgr.heap2 import XLOG_HEAP2_MULTI_INSERT, XLOG_HEAP2_OPMASK

if TYPE_CHECKING:
    from cdclake.wal.reader import XLogReader

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.wal import _primitives as primitives
    from cython.cimports.cdclake.wal._reader import Sieve, Walk
    from cython.cimports.cdclake.wal._slots import field_of, offset
else:
    from cdclake.wal import primitives
    from cdclake.wal.primitives import field_of
    from cdclake.wal.reader import Sieve, Walk

# --- routing classes ---------------------------------------------------------------------

IGNORE = 0  #: decoding never reads it: dropped before the shuffle
ALL = 1  #: every partition needs it
TXN = 2  #: a change of one transaction: the partition owning its top-level transaction
CATALOG = 3  #: heap record of a system relation (maybe pg_class): every partition, with images


# --- which record types decoding reads -----------------------------------------------------

#: heap changes of one transaction (TRUNCATE is one too, but names its relations in main data)
HEAP_CHANGES = frozenset({heap.XLOG_HEAP_INSERT, heap.XLOG_HEAP_UPDATE,
                          heap.XLOG_HEAP_HOT_UPDATE, heap.XLOG_HEAP_DELETE,
                          heap.XLOG_HEAP_CONFIRM})
#: transaction records that decide a transaction's fate or its subtransactions
XACT_DECODED = frozenset({xact.XLOG_XACT_COMMIT, xact.XLOG_XACT_PREPARE, xact.XLOG_XACT_ABORT,
                          xact.XLOG_XACT_COMMIT_PREPARED, xact.XLOG_XACT_ABORT_PREPARED,
                          xact.XLOG_XACT_ASSIGNMENT})
#: HEAP_CHANGES by op, a table (compiled, read as C)
_HEAP_CHANGE = bytes(op in HEAP_CHANGES for op in range(256))
_XACT_FINISH = frozenset({xact.XLOG_XACT_COMMIT, xact.XLOG_XACT_ABORT,
                          xact.XLOG_XACT_COMMIT_PREPARED, xact.XLOG_XACT_ABORT_PREPARED})

Router = Callable[[XLogRecord, int], int]


def _ignore(_rec: XLogRecord, _db_oid: int) -> int:
    return IGNORE


def _all(_rec: XLogRecord, _db_oid: int) -> int:
    return ALL


def heap_route(rmid: int, info: int, xid: int, nblocks: int, first_db: int, first_rel: int,
               db_oid: int) -> int:
    """The routing class of a heap or heap2 record for database ``db_oid``, from its header
    fields, its number of block references and its first block's relation: a change is
    logged against its first block, which gate 1 (other databases) reads as the decoder does;
    a TRUNCATE names its relations in its main data (no block), so its transaction routes
    it. What both the table's router and a scan's sieve (:class:`Decodable`, which has no
    record object) ask."""
    if rmid == RM_HEAP_ID:
        op = info & XLOG_HEAP_OPMASK
        if op == XLOG_HEAP_TRUNCATE:
            return TXN if xid else ALL
        if not _HEAP_CHANGE[op]:
            return IGNORE  # LOCK, INPLACE
    elif info & XLOG_HEAP2_OPMASK != XLOG_HEAP2_MULTI_INSERT:
        return IGNORE  # pruning, freezing, visibility, NEW_CID...
    if not nblocks or first_db != db_oid:
        return IGNORE
    if not xid:
        return ALL  # no transaction, so no owner
    return CATALOG if first_rel < FIRST_NORMAL_OBJECT_ID else TXN


def _route_heap(rec: XLogRecord, db_oid: int) -> int:
    """Heap and heap2's router: :func:`heap_route`."""
    blocks = rec.blocks
    loc = blocks[0].rlocator if blocks else None
    return heap_route(rec.rmid, rec.info, rec.xid, len(blocks), 0 if loc is None else loc.db,
                      0 if loc is None else loc.rel, db_oid)


def plain(rmid: int, info: int, src: primitives.Bytes, main: int, main_len: int) -> bool:
    """Whether a TXN record is an INSERT, UPDATE, DELETE or COPY row that one decoder can
    take alone (``Decoder.share``): not a TOAST chunk, a speculative insert, its
    confirmation or abort, or a TRUNCATE, which every decoder sharing a transaction must
    see. From its header fields and its main data, the ``main_len`` bytes at ``main`` in
    ``src`` (:func:`plain_change` of a record; the compiled scan's of a record's bytes)."""
    if rmid == RM_HEAP2_ID:
        return True  # MULTI_INSERT, the only heap2 record routed as a change
    op = info & XLOG_HEAP_OPMASK
    b = primitives.bytes_of(src)
    end = main + main_len
    if op == XLOG_HEAP_INSERT:
        return main_len > 2 and not primitives.u8(b, main + 2, end) & (
            XLH_INSERT_IS_SPECULATIVE | XLH_INSERT_ON_TOAST_RELATION)
    if op == XLOG_HEAP_DELETE:
        return main_len > 7 and not primitives.u8(b, main + 7, end) & XLH_DELETE_IS_SUPER
    return op in (XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE)


def plain_change(rec: XLogRecord) -> bool:
    """:func:`plain` of a record."""
    return plain(rec.rmid, rec.info, rec.main_data, 0, len(rec.main_data))


def truncates(rmid: int, info: int) -> bool:
    """Whether a TXN record is a TRUNCATE (which names its relations in its main data)."""
    return rmid == RM_HEAP_ID and info & XLOG_HEAP_OPMASK == XLOG_HEAP_TRUNCATE


def is_truncate(rec: XLogRecord) -> bool:
    """:func:`truncates` of a record."""
    return truncates(rec.rmid, rec.info)


def _route_xact(rec: XLogRecord, _db_oid: int) -> int:
    return ALL if rec.info & xact.XLOG_XACT_OPMASK in XACT_DECODED else IGNORE


def _route_standby(rec: XLogRecord, _db_oid: int) -> int:
    return ALL if rec.info & 0xF0 == standby.XLOG_RUNNING_XACTS else IGNORE


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rmgr:
    """One resource manager: identity, record-type names, decode handler, routing class."""

    id: int
    name: str  #: pg_waldump's name
    ops: Mapping[int, str] = field(default_factory=dict)  #: record type (masked info) -> name
    opmask: int = 0xF0  #: the xl_info bits that select the record type
    init_page: bool = False  #: 0x80 is XLOG_HEAP_INIT_PAGE, shown as ``+INIT``
    #: op names that differ from PostgreSQL version N on: {N: {op: name}}
    ops_since: Mapping[int, Mapping[int, str]] = field(default_factory=dict)
    #: the Decoder method that handles its records (None: decoding ignores the rmgr); it must
    #: ignore every record ``route`` classes IGNORE, and touch nothing else in them
    decode: str | None = None
    route: Router = _ignore  #: routing class of one record (before the toplevel-xid rule)

    def identify(self, info: int, version: int) -> str | None:
        """rm_identify: the record type's name, or None when unknown."""
        ops = _ops_for(self.id, version) if self.ops_since else self.ops
        name = ops.get(info & self.opmask)
        if name is not None and self.init_page and info & heap.XLOG_HEAP_INIT_PAGE:
            name += "+INIT"
        return name


@functools.cache
def _ops_for(rmid: int, version: int) -> Mapping[int, str]:
    """An rmgr's record-type names as PostgreSQL ``version`` has them."""
    rmgr = BY_ID[rmid]
    ops = dict(rmgr.ops)
    for since in sorted(rmgr.ops_since):
        if version >= since:
            ops.update(rmgr.ops_since[since])
    return ops


_HEAP2_OPS = {0x00: "REWRITE", 0x10: "PRUNE", 0x20: "VACUUM", 0x30: "FREEZE_PAGE",
              0x40: "VISIBLE", 0x50: "MULTI_INSERT", 0x60: "LOCK_UPDATED", 0x70: "NEW_CID"}
_HEAP2_OPS_17 = {0x10: "PRUNE_ON_ACCESS", 0x20: "PRUNE_VACUUM_SCAN",
                 0x30: "PRUNE_VACUUM_CLEANUP"}

RMGRS: tuple[Rmgr, ...] = (
    Rmgr(RM_XLOG_ID, "XLOG",
         {0x00: "CHECKPOINT_SHUTDOWN", 0x10: "CHECKPOINT_ONLINE", 0x20: "NOOP",
          0x30: "NEXTOID", 0x40: "SWITCH", 0x50: "BACKUP_END", 0x60: "PARAMETER_CHANGE",
          0x70: "RESTORE_POINT", 0x80: "FPW_CHANGE", 0x90: "END_OF_RECOVERY",
          0xA0: "FPI_FOR_HINT", 0xB0: "FPI", 0xD0: "OVERWRITE_CONTRECORD",
          0xE0: "CHECKPOINT_REDO"},
         # the decoder reads the first record of the WAL only (a shutdown checkpoint means a
         # clean start); that is a position, not a record type: every decoder reads it
         decode="_xlog"),
    Rmgr(RM_XACT_ID, "Transaction", xact.OPNAMES, opmask=xact.XLOG_XACT_OPMASK,
         decode="_xact", route=_route_xact),
    Rmgr(RM_SMGR_ID, "Storage", {0x10: "CREATE", 0x20: "TRUNCATE"}),
    Rmgr(RM_CLOG_ID, "CLOG", {0x00: "ZEROPAGE", 0x10: "TRUNCATE"}),
    Rmgr(RM_DBASE_ID, "Database",
         {0x00: "CREATE_FILE_COPY", 0x10: "CREATE_WAL_LOG", 0x20: "DROP"}),
    Rmgr(RM_TBLSPC_ID, "Tablespace", {0x00: "CREATE", 0x10: "DROP"}),
    Rmgr(RM_MULTIXACT_ID, "MultiXact",
         {0x00: "ZERO_OFF_PAGE", 0x10: "ZERO_MEM_PAGE", 0x20: "CREATE_ID",
          0x30: "TRUNCATE_ID"}),
    Rmgr(RM_RELMAP_ID, "RelMap", {relmap.XLOG_RELMAP_UPDATE: "UPDATE"},
         decode="_relmap", route=_all),
    Rmgr(RM_STANDBY_ID, "Standby", standby.OPNAMES, decode="_standby", route=_route_standby),
    Rmgr(RM_HEAP2_ID, "Heap2", _HEAP2_OPS, opmask=heap2.XLOG_HEAP2_OPMASK, init_page=True,
         ops_since={17: _HEAP2_OPS_17}, decode="_heap2", route=_route_heap),
    Rmgr(RM_HEAP_ID, "Heap", heap.OPNAMES, opmask=heap.XLOG_HEAP_OPMASK, init_page=True,
         decode="_heap", route=_route_heap),
    Rmgr(RM_BTREE_ID, "Btree",
         {0x00: "INSERT_LEAF", 0x10: "INSERT_UPPER", 0x20: "INSERT_META", 0x30: "SPLIT_L",
          0x40: "SPLIT_R", 0x50: "INSERT_POST", 0x60: "DEDUP", 0x70: "DELETE",
          0x80: "UNLINK_PAGE", 0x90: "UNLINK_PAGE_META", 0xA0: "NEWROOT",
          0xB0: "MARK_PAGE_HALFDEAD", 0xC0: "VACUUM", 0xD0: "REUSE_PAGE",
          0xE0: "META_CLEANUP"}),
    Rmgr(RM_HASH_ID, "Hash"),
    Rmgr(RM_GIN_ID, "Gin"),
    Rmgr(RM_GIST_ID, "Gist"),
    Rmgr(RM_SEQ_ID, "Sequence", {0x00: "LOG"}),
    Rmgr(RM_SPGIST_ID, "SPGist"),
    Rmgr(RM_BRIN_ID, "BRIN"),
    Rmgr(RM_COMMIT_TS_ID, "CommitTs", {0x00: "ZEROPAGE", 0x10: "TRUNCATE"}),
    Rmgr(RM_REPLORIGIN_ID, "ReplicationOrigin", {0x00: "SET", 0x10: "DROP"}),
    Rmgr(RM_GENERIC_ID, "Generic", {0x00: "Generic"}),
    Rmgr(RM_LOGICALMSG_ID, "LogicalMessage", {logicalmsg.XLOG_LOGICAL_MESSAGE: "MESSAGE"},
         decode="_message", route=_all),
)

#: rmgr id -> Rmgr; ids 128-255 are custom resource managers, unknown to cdclake
BY_ID: Mapping[int, Rmgr] = MappingProxyType({r.id: r for r in RMGRS})
#: rmgr ids are one byte: the lists below index any id without a bounds check
RMGR_SLOTS = 256


def rmgr_name(rmid: int) -> str:
    """pg_waldump's name of an rmgr (``customNNN`` for ones cdclake does not know)."""
    r = BY_ID.get(rmid)
    return r.name if r is not None else f"custom{rmid:03d}"


def rmgr_by_name(name: str) -> Rmgr | None:
    """The rmgr pg_waldump calls ``name`` (case-insensitive), or None."""
    folded = name.lower()
    for r in RMGRS:
        if r.name.lower() == folded:
            return r
    return None


def identify(rec: XLogRecord, version: int) -> str:
    """pg_waldump's record type (``rm_identify``), or ``UNKNOWN (0xNN)``."""
    r = BY_ID.get(rec.rmid)
    name = r.identify(rec.info, version) if r is not None else None
    return name or f"UNKNOWN (0x{rec.info & 0xF0:02X})"


def dispatch(target: object) -> list[Callable[[XLogRecord], None] | None]:
    """The decode handlers of ``target`` (a Decoder) indexed by rmgr id, for its hot loop."""
    out: list[Callable[[XLogRecord], None] | None] = [None] * RMGR_SLOTS
    for r in RMGRS:
        if r.decode is not None:
            out[r.id] = getattr(target, r.decode)
    return out


class Counts(Protocol):
    """The statistics :func:`process` keeps (``DecodeStats``)."""

    records: int
    last_lsn: int


class Buffer(Protocol):
    def assign_child(self, top_xid: int, sub_xid: int, lsn: int) -> None: ...


class Processor(Protocol):
    """What :func:`process` reads of a decoder (:class:`~cdclake.decoding.decode.Decoder`)."""

    rb: Buffer
    #: :func:`dispatch`'s handlers
    handlers: list[Callable[[XLogRecord], None] | None]

    @property
    def stats(self) -> Counts: ...


if cython.compiled:  # where XLogRecord holds the fields process reads (wal/_slots.pxd)
    R_LSN = offset(XLogRecord, "lsn")
    R_XID = offset(XLogRecord, "xid")
    R_RMID = offset(XLogRecord, "rmid")
    R_TOPLEVEL_XID = offset(XLogRecord, "toplevel_xid")
else:  # read by name
    R_LSN = R_XID = R_RMID = R_TOPLEVEL_XID = 0


def process(decoder: Processor, rec: XLogRecord) -> None:
    """One record through a decoder (PostgreSQL's LogicalDecodingProcessRecord): counted; a
    subtransaction's first record, whatever its kind, joins it to its top-level transaction
    (decoded or not, it is the only record that says which transaction the subtransaction
    belongs to); then the handler the table names for its rmgr, if any."""
    st = decoder.stats
    st.records += 1
    lsn = field_of(rec, XLogRecord, R_LSN, "lsn")
    st.last_lsn = lsn
    top = field_of(rec, XLogRecord, R_TOPLEVEL_XID, "toplevel_xid")
    if top:
        decoder.rb.assign_child(top, field_of(rec, XLogRecord, R_XID, "xid"), lsn)
    handler = decoder.handlers[field_of(rec, XLogRecord, R_RMID, "rmid")]
    if handler is not None:
        handler(rec)


_ROUTERS: list[Router] = [BY_ID[i].route if i in BY_ID else _ignore for i in range(RMGR_SLOTS)]


# --- routing -----------------------------------------------------------------------------


def route_class(rec: XLogRecord, db_oid: int) -> int:
    """The record's own routing class (IGNORE, ALL, TXN or CATALOG) for database ``db_oid``."""
    return _ROUTERS[rec.rmid](rec, db_oid)


#: by rmgr id and the high nibble of xl_info, whether a decoder may read a record (heap and
#: heap2: by the relation): the table's routing, asked once per kind
_READS = bytes(rmid in (RM_HEAP_ID, RM_HEAP2_ID)
               or route_class(XLogRecord(0, 0, 0, 1, rmid, nibble << 4, 0), 0) != IGNORE
               for rmid in range(RMGR_SLOTS) for nibble in range(16))


class Decodable(Sieve):
    """The sieve of :func:`decodable`: the records routed to a decoder of database ``db_oid``,
    those naming their top-level transaction, and the first."""

    def __init__(self, db_oid: int) -> None:
        self.db = db_oid
        self.seen = False

    def wants(self, walk: Walk) -> bool:
        if not self.seen:
            self.seen = True
            return True
        rmid = walk.rmid
        if walk.toplevel:
            return True
        if not _READS[rmid * 16 + (walk.info >> 4)]:
            return False
        if rmid != RM_HEAP_ID and rmid != RM_HEAP2_ID:
            return True
        return heap_route(rmid, walk.info, walk.xid, walk.nblocks, walk.first_db,
                          walk.first_rel, self.db) != IGNORE


def decodable(reader: XLogReader, db_oid: int) -> Iterator[XLogRecord]:
    """The records of ``reader`` a decoder of database ``db_oid`` reads: those the table
    routes to decoding (:func:`route_class` not IGNORE), those naming their top-level
    transaction (a subtransaction's first record, whatever it is) and the first one (the
    decoder's start-up looks at it). The others — index and vacuum records, full-page images,
    other databases' changes: nearly two thirds of the records of a pgbench load — the
    decoder passes over: the reader checks them as it walks, and builds none."""
    return Walk(reader, Decodable(db_oid))


def memberships(rec: XLogRecord, version: int) -> list[tuple[int, int]]:
    """``(subxid, parent xid)`` facts the record states; the parent may itself be a subxact.

    From the toplevel-xid field of a subtransaction's first record, XLOG_XACT_ASSIGNMENT
    records, and the subtransaction lists of commit, abort and prepare records (a subxact's
    abort lists its own committed children).
    """
    out: list[tuple[int, int]] = []
    if rec.toplevel_xid and rec.toplevel_xid != rec.xid:
        out.append((rec.xid, rec.toplevel_xid))
    if rec.rmid != RM_XACT_ID:
        return out
    op = rec.info & xact.XLOG_XACT_OPMASK
    if op == xact.XLOG_XACT_ASSIGNMENT:
        a = xact.parse(rec, version)
        assert isinstance(a, xact.XactAssignment)
        out.extend((s, a.xtop) for s in a.subxacts)
    elif op in _XACT_FINISH:
        f = xact.parse(rec, version)
        assert isinstance(f, xact.XactFinish)
        parent = f.twophase_xid or rec.xid
        if parent:
            out.extend((s, parent) for s in f.subxacts if s != parent)
    elif op == xact.XLOG_XACT_PREPARE:
        p = xact.parse(rec, version)
        assert isinstance(p, xact.XactPrepare)
        out.extend((s, rec.xid) for s in p.subxacts if s != rec.xid)
    return out


decodable = native.twin(decodable, "cdclake.decoding._rmgrs")
