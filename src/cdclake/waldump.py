"""``cdclake waldump [--json] PATH...``: print WAL records the way pg_waldump does.

Why our own: operators debugging a decode need to see what cdclake's reader sees (the same
records, lengths and block references), on machines where no PostgreSQL binaries are
installed and on ``.zst`` segments straight from the archive. The text output follows
pg_waldump's line layout so the two can be diffed; ``--json`` gives one object per record for
scripts. Descriptions are informative for the records cdclake parses (heap, heap2, xact,
standby, logical messages, storage, relmap, checkpoints and other XLOG records) and name the
record type for the rest; they are not guaranteed to be byte-identical to pg_waldump's.
Rmgr and record-type names come from the rmgr table (:mod:`cdclake.decoding.rmgrs`); this
command sits above the ``wal`` and ``decoding`` layers for that reason.

``--json`` spent four fifths of its time formatting, so this file is compiled as itself
(Cython's pure-Python mode, ``_waldump.pxd``): the fields of the records a WAL is mostly made
of (heap INSERT, UPDATE, HOT_UPDATE and DELETE, plain COMMITs) are read by the field readers
``heap.parse`` and ``xact.parse`` read them with, as C integers, and their f-strings become
C formatting; a record's type comes from a cache of the rmgr table's names (``identify``
depends only on the rmgr, the info byte and the server version).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from cdclake import native
from cdclake.decoding.rmgrs import RMGRS, identify, rmgr_by_name, rmgr_name
from cdclake.errors import CdclakeError
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.tuples.datetimes import POSTGRES_EPOCH_JDATE, USECS_PER_DAY
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import (
    FORK_NAMES,
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_RELMAP_ID,
    RM_SMGR_ID,
    RM_STANDBY_ID,
    RM_XACT_ID,
    RM_XLOG_ID,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, heap2, logicalmsg, relmap, smgr, standby, xact
from cdclake.wal.source import DirectorySource

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._datetimes import floor_divmod
    from cython.cimports.cdclake.tuples._julian import j2date
    from cython.cimports.cdclake.wal.rmgr._heap import delete_fields, insert_fields, update_fields
    from cython.cimports.cdclake.wal.rmgr._xact import finish_fields
else:
    from cdclake.tuples.datetimes import floor_divmod
    from cdclake.tuples.julian import j2date
    from cdclake.wal.rmgr.heap import delete_fields, insert_fields, update_fields
    from cdclake.wal.rmgr.xact import finish_fields

# CheckPoint (catalog/pg_control.h); wal_level at 20 is padding before 17, so offsets agree.
_CHECKPOINT = struct.Struct("<QII?3xiQIIIIIIIxxxxqIII")
_PAYLOAD_SHOWN = 32  #: logical-message payload bytes printed before "..."
#: the first and the last µs of 0001-01-01 .. 9999-12-31 from PostgreSQL's epoch: the years
#: a timestamp prints in plainly (the others as ``<timestamp µs>``)
FIRST_PLAIN_US = -63_082_281_600_000_000
LAST_PLAIN_US = 252_455_615_999_999_999

#: the record kinds whose fields are formatted here as C integers where compiled
HEAP_OPMASK = heap.XLOG_HEAP_OPMASK
HEAP_INSERT = heap.XLOG_HEAP_INSERT
HEAP_UPDATE = heap.XLOG_HEAP_UPDATE
HEAP_HOT_UPDATE = heap.XLOG_HEAP_HOT_UPDATE
HEAP_DELETE = heap.XLOG_HEAP_DELETE
XACT_OPMASK = xact.XLOG_XACT_OPMASK
XACT_COMMIT = xact.XLOG_XACT_COMMIT
XINFO_HAS_DBINFO = xact.XACT_XINFO_HAS_DBINFO

#: ``identify``'s names by (version, rmgr id, info byte)
_kinds: dict[int, str] = {}
#: each rmgr's name, and each fork's, as a JSON string
_rmgr_json: dict[int, str] = {}


def record_type(rec: XLogRecord, version: int) -> str:
    """pg_waldump's record type name (``rm_identify``), or ``UNKNOWN (0xNN)``."""
    key = version << 16 | rec.rmid << 8 | rec.info
    kind = _kinds.get(key)
    if kind is None:
        kind = _kinds[key] = identify(rec, version)
    return kind


def _timestamp(us: int) -> str:
    """A TimestampTz (µs since 2000-01-01 UTC) as PostgreSQL prints it, in UTC, six digits of
    µs (the calendar: :func:`~cdclake.tuples.julian.j2date`)."""
    if not FIRST_PLAIN_US <= us <= LAST_PLAIN_US:
        return f"<timestamp {us}>"
    days, t = floor_divmod(us, USECS_PER_DAY)
    y, m, d = j2date(days + POSTGRES_EPOCH_JDATE)
    secs = t // 1_000_000
    return (f"{y:04d}-{m:02d}-{d:02d} {secs // 3600:02d}:{secs // 60 % 60:02d}:"
            f"{secs % 60:02d}.{t - secs * 1_000_000:06d} UTC")


def _xids(xids: Iterable[int]) -> str:
    return " ".join(str(x) for x in xids)


_WAL_LEVELS = {0: "minimal", 1: "replica", 2: "logical"}


def _desc_xlog(rec: XLogRecord, version: int) -> str:
    op = rec.info & 0xF0
    md = rec.main_data
    if op in (0x00, 0x10) and len(md) >= _CHECKPOINT.size:
        (redo, tli, prev_tli, fpw, wal_level, next_xid, next_oid, next_multi, next_moff,
         oldest_xid, oldest_db, oldest_multi, oldest_mdb, _time, cts_old, cts_new,
         oldest_active) = _CHECKPOINT.unpack_from(md, 0)
        level = (f"; wal_level {_WAL_LEVELS.get(wal_level, wal_level)}" if version >= 17
                 else "")
        return (f"redo {format_lsn(redo)}; tli {tli}; prev tli {prev_tli}; fpw {str(fpw).lower()}"
                f"{level}; xid {next_xid >> 32}:{next_xid & 0xFFFFFFFF}; oid {next_oid}; multi "
                f"{next_multi}; offset {next_moff}; oldest xid {oldest_xid} in DB {oldest_db}"
                f"; oldest multi {oldest_multi} in DB {oldest_mdb}; oldest/newest commit "
                f"timestamp xid: {cts_old}/{cts_new}; oldest running xid "
                f"{oldest_active}; {'online' if op == 0x10 else 'shutdown'}")
    if op == 0x30 and len(md) >= 4:  # NEXTOID
        return str(struct.unpack_from("<I", md, 0)[0])
    if op == 0xE0 and len(md) >= 4:  # CHECKPOINT_REDO: wal_level
        level = struct.unpack_from("<i", md, 0)[0]
        return f"wal_level {_WAL_LEVELS.get(level, level)}"
    if op == 0x70 and md:  # RESTORE_POINT: time, name[64]
        return bytes(md[8:]).split(b"\0", 1)[0].decode(errors="replace")
    return ""


def _desc_xact(rec: XLogRecord, version: int) -> str:
    if rec.info & XACT_OPMASK == XACT_COMMIT:
        try:
            fields = finish_fields(rec.info, XACT_COMMIT, rec.main_data, version)
        except (IndexError, ValueError):  # xact.parse says what is wrong
            fields = None
        if fields is not None and not fields[1] & ~XINFO_HAS_DBINFO:
            return _timestamp(fields[0])  # a plain COMMIT: its time alone
    parsed = xact.parse(rec, version)
    if isinstance(parsed, xact.XactFinish):
        parts = [_timestamp(parsed.xact_time)]
        if parsed.twophase_xid:
            parts[0] = f"{parsed.twophase_xid}: {parts[0]}"
        if parsed.relations:
            parts.append("rels: " + " ".join([str(r) for r in parsed.relations]))
        if parsed.dropped_stats:
            parts.append(f"dropped stats: {parsed.dropped_stats}")
        if parsed.subxacts:
            parts.append("subxacts: " + _xids(parsed.subxacts))
        if parsed.invals:
            parts.append(f"inval msgs: {parsed.invals}")
        if parsed.gid:
            parts.append(f"gid {parsed.gid}")
        if parsed.origin_lsn:
            parts.append(f"origin: lsn {format_lsn(parsed.origin_lsn)}, at "
                         f"{_timestamp(parsed.origin_ts)}")
        return "; ".join(parts)
    if isinstance(parsed, xact.XactPrepare):
        return (f"gid {parsed.gid}: {_timestamp(parsed.prepared_at)}"
                + (f"; subxacts: {_xids(parsed.subxacts)}" if parsed.subxacts else ""))
    if isinstance(parsed, xact.XactAssignment):
        return f"xtop {parsed.xtop}: subxacts: {_xids(parsed.subxacts)}"
    if isinstance(parsed, xact.XactInvalidations):
        return f"; inval msgs: {parsed.nmsgs}"
    return ""


def _desc_smgr(rec: XLogRecord, _version: int) -> str:
    parsed = smgr.parse(rec)
    if isinstance(parsed, smgr.SmgrCreate):
        return f"{_relpath(parsed.rlocator, parsed.fork)}"
    if isinstance(parsed, smgr.SmgrTruncate):
        return (f"{_relpath(parsed.rlocator, 0)} to {parsed.blkno} blocks flags "
                f"{parsed.flags}")
    return ""


def _relpath(loc: Any, fork: int) -> str:
    """PostgreSQL's relpath(): base/<db>/<rel>, global/<rel>, pg_tblspc/... plus _fork."""
    suffix = "" if fork == 0 else "_" + _fork_name(fork)
    if loc.spc == 1664:
        return f"global/{loc.rel}{suffix}"
    if loc.spc == 1663:
        return f"base/{loc.db}/{loc.rel}{suffix}"
    return f"pg_tblspc/{loc.spc}/{loc.db}/{loc.rel}{suffix}"


def _fork_name(fork: int) -> str:
    return FORK_NAMES[fork] if 0 <= fork < len(FORK_NAMES) else f"fork{fork}"


def _desc_standby(rec: XLogRecord, _version: int) -> str:
    parsed = standby.parse(rec)
    if isinstance(parsed, standby.RunningXacts):
        out = (f"nextXid {parsed.next_xid} latestCompletedXid {parsed.latest_completed_xid} "
               f"oldestRunningXid {parsed.oldest_running_xid}")
        if parsed.xcnt:
            out += f"; {parsed.xcnt} xacts: {_xids(parsed.xids)}"
        if parsed.overflow:
            out += "; subxid overflowed"
        elif parsed.subxcnt:
            out += f"; {parsed.subxcnt} subxacts: {_xids(parsed.subxids)}"
        return out
    if isinstance(parsed, standby.StandbyLocks):
        return " ".join(f"xid {x} db {d} rel {r}" for x, d, r in parsed.locks)
    if rec.info & 0xF0 == standby.XLOG_INVALIDATIONS and len(rec.main_data) >= 16:
        nmsgs = struct.unpack_from("<i", rec.main_data, 12)[0]
        return f"; inval msgs: {nmsgs}"
    return ""


def _desc_heap(rec: XLogRecord, _version: int) -> str:
    op = rec.info & HEAP_OPMASK
    blocks = rec.blocks
    if blocks and op == HEAP_INSERT:
        off, flags = insert_fields(rec, rec.main_data, blocks[0].data)
        return f"off: {off}, flags: 0x{flags:02X}"
    if blocks and op in (HEAP_UPDATE, HEAP_HOT_UPDATE):
        xmax, off, bits, flags, new_xmax, new_off, _prefix, _suffix, _at = update_fields(
            rec, op, rec.main_data, blocks[0].data)
        return (f"old_xmax: {xmax}, old_off: {off}, old_infobits: 0x{bits:02X}, flags: "
                f"0x{flags:02X}, new_xmax: {new_xmax}, new_off: {new_off}")
    if blocks and op == HEAP_DELETE:
        xmax, off, bits, flags = delete_fields(rec, rec.main_data)
        return f"xmax: {xmax}, off: {off}, infobits: 0x{bits:02X}, flags: 0x{flags:02X}"
    parsed = heap.parse(rec)  # the rest, and the records without a block, which it refuses
    if isinstance(parsed, heap.HeapTruncate):
        names = [n for bit, n in ((heap.XLH_TRUNCATE_CASCADE, "CASCADE"),
                                  (heap.XLH_TRUNCATE_RESTART_SEQS, "RESTART_SEQS"))
                 if parsed.flags & bit]
        return (("flags: " + " ".join(names) + ", " if names else "")
                + f"nrelids: {len(parsed.relids)}, relids: "
                + " ".join([str(r) for r in parsed.relids]))
    if isinstance(parsed, (heap.HeapConfirm, heap.HeapInplace)):
        return f"off: {parsed.offnum}"
    return ""


def _desc_heap2(rec: XLogRecord, version: int) -> str:
    parsed = heap2.parse(rec, version)
    if isinstance(parsed, heap2.MultiInsert):
        return f"ntuples: {parsed.ntuples}, flags: 0x{parsed.flags:02X}"
    if isinstance(parsed, heap2.NewCid):
        return (f"rel: {parsed.rlocator}, tid: {parsed.ctid[0]}/{parsed.ctid[1]}, cmin: "
                f"{parsed.cmin}, cmax: {parsed.cmax}, combo: {parsed.combocid}")
    return ""


def _desc_logicalmsg(rec: XLogRecord, _version: int) -> str:
    m = logicalmsg.parse(rec)
    shown = " ".join(f"{b:02X}" for b in m.message[:_PAYLOAD_SHOWN])
    more = " ..." if len(m.message) > _PAYLOAD_SHOWN else ""
    return (f"{'transactional' if m.transactional else 'non-transactional'}, prefix "
            f"\"{m.prefix}\"; payload ({len(m.message)} bytes): {shown}{more}")


def _desc_relmap(rec: XLogRecord, _version: int) -> str:
    parsed = relmap.parse(rec)
    if parsed is None:
        return ""
    return (f"database {parsed.db_id} tablespace {parsed.ts_id} mappings "
            f"{len(parsed.mappings)}")


_DESCRIBERS: dict[int, Callable[[XLogRecord, int], str]] = {
    RM_XLOG_ID: _desc_xlog, RM_XACT_ID: _desc_xact, RM_SMGR_ID: _desc_smgr,
    RM_STANDBY_ID: _desc_standby, RM_HEAP_ID: _desc_heap, RM_HEAP2_ID: _desc_heap2,
    RM_LOGICALMSG_ID: _desc_logicalmsg, RM_RELMAP_ID: _desc_relmap,
}


def describe(rec: XLogRecord, version: int) -> str:
    """Record type plus, for the records cdclake parses, their main fields.

    A record whose body the parser rejects raises WalCorruptError (it passed its CRC, so the
    writer produced it: that is a cdclake bug or unsupported layout worth stopping for).
    """
    kind = record_type(rec, version)
    fn = _DESCRIBERS.get(rec.rmid)
    detail = fn(rec, version) if fn is not None else ""
    if not detail:
        return kind
    return f"{kind}{detail}" if detail.startswith(";") else f"{kind} {detail}"


# --- output --------------------------------------------------------------------------------


#: JSON's own string escaping (the C one ``json.dumps`` uses)
_json_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


def record_json_line(rec: XLogRecord, version: int) -> str:
    """One record as a JSON object on one line (the ``--json`` output), written as
    ``json.dumps`` writes it but without building a dict first: keys lsn, prev, xid, rmgr,
    tot_len, rec_len, blocks (id, rel, fork, blk, image) and desc."""
    lsn = rec.lsn
    prev = rec.prev
    rmid = rec.rmid
    rmgr = _rmgr_json.get(rmid)
    if rmgr is None:
        rmgr = _rmgr_json[rmid] = _json_str(rmgr_name(rmid))
    rec_len = rec.tot_len  # less the block images
    # the LSNs and relation locators are spelled out as format_lsn and RelFileLocator print
    # them, so that the compiled module formats their integers in C
    parts = []
    for b in rec.blocks:
        loc = b.rlocator
        fork = b.fork
        image = b.image
        if image is not None:
            rec_len -= len(image)
        parts.append(
            f'{{"id": {b.id}, "rel": "{loc.spc}/{loc.db}/{loc.rel}", "fork": '
            f'{_FORK_JSON[fork] if 0 <= fork < len(_FORK_JSON) else _json_str(_fork_name(fork))}, '
            f'"blk": {b.blkno}, "image": {"false" if image is None else "true"}}}')
    return (f'{{"lsn": "{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}", '
            f'"prev": "{prev >> 32:X}/{prev & 0xFFFFFFFF:X}", '
            f'"xid": {rec.xid}, "rmgr": {rmgr}, "tot_len": {rec.tot_len}, '
            f'"rec_len": {rec_len}, "blocks": [{", ".join(parts)}], '
            f'"desc": {_json_str(describe(rec, version))}}}')


_FORK_JSON = tuple(_json_str(f) for f in FORK_NAMES)


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    describe = native.twin(describe, "cdclake._waldump")  # type: ignore[assignment]
    record_json_line = native.twin(record_json_line, "cdclake._waldump")  # type: ignore[assignment]


def record_text(rec: XLogRecord, version: int) -> str:
    """One record as pg_waldump prints it (default, non-detailed block references)."""
    rm = rmgr_name(rec.rmid)
    line = (f"rmgr: {rm:<11} len (rec/tot): {rec.rec_len:6}/{rec.tot_len:6}, tx: {rec.xid:10}, "
            f"lsn: {rec.lsn >> 32:X}/{rec.lsn & 0xFFFFFFFF:08X}, "
            f"prev {rec.prev >> 32:X}/{rec.prev & 0xFFFFFFFF:08X}, desc: {describe(rec, version)}")
    refs = []
    for b in rec.blocks:
        fork = "" if b.fork == 0 else f" fork {_fork_name(b.fork)}"
        ref = f", blkref #{b.id}: rel {b.rlocator}{fork} blk {b.blkno}"
        if b.image is not None:
            ref += " FPW" if b.apply_image else " FPW for WAL verification"
        refs.append(ref)
    return line + "".join(refs)


def iter_records(paths: Iterable[str], start: int | None = None, end: int | None = None,
                 rmgrs: set[int] | None = None,
                 limit: int | None = None) -> Iterator[tuple[XLogRecord, XLogReader]]:
    """The records of ``paths`` (files and/or directories, read in segment order)."""
    reader = XLogReader(DirectorySource(list(paths)), start_lsn=start, end_lsn=end)
    n = 0
    for rec in reader:
        if rmgrs is not None and rec.rmid not in rmgrs:
            continue
        if limit is not None and n >= limit:
            return
        n += 1
        yield rec, reader


def _rmgr_id(name: str) -> int:
    """``--rmgr`` value (case-insensitive pg_waldump name) -> rmgr id."""
    rm = rmgr_by_name(name)
    if rm is None:
        raise argparse.ArgumentTypeError(
            f"unknown resource manager {name!r}; one of: {', '.join(r.name for r in RMGRS)}")
    return rm.id


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="WAL segment files (plain or .zst) and/or directories holding them; "
                             "read in segment order across segment boundaries")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per record instead of pg_waldump-style lines")
    parser.add_argument("-s", "--start", type=parse_lsn, metavar="LSN",
                        help="first record: the one starting at or after this LSN")
    parser.add_argument("-e", "--end", type=parse_lsn, metavar="LSN",
                        help="stop before the first record starting at or after this LSN")
    parser.add_argument("-n", "--limit", type=int, metavar="N",
                        help="print at most N records")
    parser.add_argument("-r", "--rmgr", type=_rmgr_id, action="append", metavar="NAME",
                        help="only records of this resource manager (pg_waldump's names, e.g. "
                             "Heap, Transaction); repeatable")


def run(args: argparse.Namespace, config: object = None, out: TextIO | None = None) -> int:
    """Print the records; WAL errors propagate as CdclakeError (the CLI exits 2)."""
    out = out or sys.stdout
    rmgrs = set(args.rmgr) if args.rmgr else None
    if args.limit is not None and args.limit < 0:
        raise CdclakeError("--limit must not be negative")
    fmt = record_json_line if args.json else record_text
    for rec, reader in iter_records(args.paths, args.start, args.end, rmgrs, args.limit):
        out.write(fmt(rec, reader.version) + "\n")
    return 0


__all__ = ["add_arguments", "describe", "iter_records", "record_text",
           "record_type", "run"]
