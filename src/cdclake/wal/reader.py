# cython: cdivision=True
"""XLogReader: segment bytes -> assembled, CRC-checked WAL records (PostgreSQL 15-18).

Layouts from access/xlog_internal.h and access/xlogrecord.h (docs/architecture.md). Records are
8-aligned, may be split across pages and segments (every later page starts with a header whose
FIRST_IS_CONTRECORD flag and rem_len say how much of the record follows), and carry a CRC-32C
over their payload then their header. The reader tells an *end of WAL* (zeros where a record
should start, a recycled segment whose pages carry another LSN, the end of the last segment)
from *corruption* (bad CRC, broken prev-link, a continuation that does not continue, a
segment missing between two present ones): the first ends iteration, the second raises an
error naming the segment file and LSN.

Written once and compiled as itself (Cython's pure-Python mode, ``cdclake.native``): the
C types of the walk over records are in ``_reader.pxd``, and what differs between the builds
— reading a field, the CRC, building a record — are the primitives of
:mod:`cdclake.wal.primitives` (compiled: ``_primitives``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from cdclake import native
from cdclake.errors import (
    EndOfWal,
    WalCorruptError,
    WalGapError,
    WalTruncatedError,
    WalVersionError,
)
from cdclake.lsn import SegmentName, TimelineSwitch, format_lsn, parse_history
from cdclake.wal.record import (
    BKPBLOCK_HAS_DATA,
    BKPBLOCK_HAS_IMAGE,
    BKPBLOCK_SAME_REL,
    BKPIMAGE_COMPRESSED,
    BKPIMAGE_HAS_HOLE,
    INVALID_REP_ORIGIN,
    INVALID_XID,
    XLR_BLOCK_ID_DATA_LONG,
    XLR_BLOCK_ID_DATA_SHORT,
    XLR_BLOCK_ID_ORIGIN,
    XLR_BLOCK_ID_TOPLEVEL_XID,
    XLR_MAX_BLOCK_ID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)
from cdclake.wal.source import SegmentSource
from cdclake.wal.timelines import TimelinePath, newest_path

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.wal import _primitives as primitives
else:
    from cdclake.wal import primitives

PAGE_SIZE = 8192
SHORT_HEADER = 24
LONG_HEADER = 40
RECORD_HEADER = 24

XLP_FIRST_IS_CONTRECORD = 0x0001
XLP_LONG_HEADER = 0x0002
XLP_BKP_REMOVABLE = 0x0004
XLP_FIRST_IS_OVERWRITE_CONTRECORD = 0x0008
XLP_ALL_FLAGS = 0x000F

#: page magic -> PostgreSQL major version (XLOG_PAGE_MAGIC)
MAGIC_VERSIONS = {0xD110: 15, 0xD113: 16, 0xD116: 17, 0xD118: 18}

XLOG_SWITCH = 0x40
RM_MAX_BUILTIN = 21
RM_MIN_CUSTOM = 128

_PAGE = struct.Struct("<HHIQI")  # magic, info, tli, pageaddr, rem_len
_LONG = struct.Struct("<QII")  # sysid, seg_size, xlog_blcksz (at offset 24)


def _maxalign(n: int) -> int:
    return (n + 7) & ~7


def first_record_at(lsn: int, segment_size: int) -> int:
    """Where the first record at or after ``lsn`` may start: past the page header when
    ``lsn`` starts a page (a segment's first page has the long one)."""
    if lsn % segment_size == 0:
        return lsn + LONG_HEADER
    if lsn % PAGE_SIZE == 0:
        return lsn + SHORT_HEADER
    return lsn


class XLogReader:
    """Iterate the records of a segment source, from ``start_lsn`` up to ``end_lsn``.

    ``start_lsn=None`` starts at the first record beginning in the first segment; a start LSN
    (a record's, or any other such as a page boundary) yields the first record starting at or
    after it, reading from its page on: nothing before that page is read but the first
    page's long header, which gives the segment size. Records are
    yielded while their start LSN is below ``end_lsn``; one that starts before it and continues
    into the next segment is completed from that segment's head.
    """

    def __init__(self, source: SegmentSource, start_lsn: int | None = None,
                 end_lsn: int | None = None, *, timeline: int | None = None) -> None:
        self.source = source
        self.start_lsn = start_lsn
        self.end_lsn = end_lsn
        self.timeline_request = timeline
        self.version = 0
        self.magic = 0
        self.system_identifier = 0
        self.segment_size = 0
        self.end_reason = ""
        self.end_of_wal = 0  #: LSN where valid WAL ended (or reading stopped)
        self._segno_tli: dict[int, int] = {}
        self._max_segno = -1
        #: the segment read last: its number, bytes, name for messages and timeline
        self._seg_cache: tuple[int, memoryview, str, int] | None = None

    # -- segments ----------------------------------------------------------------------------

    def _plan(self) -> int:
        """Choose a timeline per segment number; return where reading begins: the page of
        ``start_lsn`` (its records before ``start_lsn`` are read, not yielded: a page is
        where record boundaries can be found), else the first segment's start.

        Segments are read along the newest timeline's history (:mod:`cdclake.wal.timelines`),
        or the requested timeline's: a segment of an abandoned branch is not read, as if it
        were absent."""
        segs = self.source.list_segments()
        if not segs:
            raise WalGapError("no WAL segments to read")
        self.segment_size = size = self.source.segment_size
        if self.timeline_request is None:
            path = newest_path({s.timeline for s in segs}, self._history)
        else:
            path = TimelinePath(self.timeline_request,
                                tuple(self._history(self.timeline_request) or ()))
        self._segno_tli = {s.segno: s.timeline for s in segs
                           if s.timeline == path.timeline_of(s.segno, size)}
        if not self._segno_tli:
            raise WalGapError(f"no WAL segment on timeline {path.timeline}'s path (segments of "
                              f"timelines {sorted({s.timeline for s in segs})} only)")
        self._max_segno = max(self._segno_tli)
        if self.start_lsn is not None:
            return self.start_lsn // PAGE_SIZE * PAGE_SIZE
        return min(self._segno_tli) * size

    def _history(self, timeline: int) -> list[TimelineSwitch] | None:
        text = self.source.read_history(timeline) if timeline > 1 else None
        return None if text is None else parse_history(text, f"{timeline:08X}.history")

    def _segment(self, segno: int) -> tuple[memoryview, str]:
        cached = self._seg_cache
        if cached is not None and cached[0] == segno:
            return cached[1], cached[2]
        tli = self._segno_tli.get(segno)
        size = self.segment_size
        if tli is None:
            name = SegmentName(self._segno_tli.get(segno - 1, 1), segno).name(size)
            if segno < self._max_segno:
                raise WalGapError(f"segment {name} is missing but later segments are present",
                                  segment=name, lsn=segno * size)
            raise EndOfWal(f"no segment {name}")
        seg = SegmentName(tli, segno)
        where = self.source.describe(seg)
        data = self.source.read_segment(seg)
        partial = getattr(self.source, "is_partial", lambda s: False)(seg)
        if len(data) != size and not partial:
            raise WalTruncatedError(
                f"segment file has {len(data)} bytes, expected {size}", segment=where,
                lsn=segno * size + len(data))
        view = memoryview(data)
        self._seg_cache = (segno, view, where, tli)
        return view, where

    # -- pages -------------------------------------------------------------------------------

    def _page(self, lsn: int) -> tuple[int, int, int]:
        """The page starting at ``lsn``: (header size, xlp_info, xlp_rem_len).

        Raises EndOfWal for pages that are not (yet) part of this WAL stream.
        """
        size = self.segment_size
        view, where = self._segment(lsn // size)
        off = lsn % size
        if off + SHORT_HEADER > len(view):
            raise EndOfWal(f"end of segment file {where}")
        magic, info, _tli, pageaddr, rem_len = _PAGE.unpack_from(view, off)
        if magic == 0 and pageaddr == 0:
            raise EndOfWal(f"zeroed page at {format_lsn(lsn)}")
        if self.magic == 0:
            version = MAGIC_VERSIONS.get(magic)
            if version is None:
                raise WalVersionError(f"unknown WAL page magic 0x{magic:04X} (cdclake reads "
                                      "PostgreSQL 15-18: 0xD110, 0xD113, 0xD116, 0xD118)",
                                      segment=where, lsn=lsn)
            self.magic, self.version = magic, version
        if pageaddr != lsn:
            raise EndOfWal(f"page at {format_lsn(lsn)} has pageaddr {format_lsn(pageaddr)} "
                           "(recycled or not yet written)")
        if magic != self.magic:
            raise WalVersionError(f"page magic 0x{magic:04X} differs from 0x{self.magic:04X} "
                                  "of the preceding WAL", segment=where, lsn=lsn)
        if info & ~XLP_ALL_FLAGS:
            raise WalCorruptError(f"invalid page info bits 0x{info:04X}", segment=where, lsn=lsn)
        header = SHORT_HEADER
        if off == 0:
            if not info & XLP_LONG_HEADER:
                raise WalCorruptError("first page of segment lacks a long header",
                                      segment=where, lsn=lsn)
            if off + LONG_HEADER > len(view):
                raise WalTruncatedError("segment is cut off in its first page header",
                                        segment=where, lsn=lsn)
            sysid, seg_size, blcksz = _LONG.unpack_from(view, off + 24)
            if self.system_identifier and sysid != self.system_identifier:
                raise WalCorruptError(f"system identifier {sysid} differs from "
                                      f"{self.system_identifier} of the preceding WAL",
                                      segment=where, lsn=lsn)
            self.system_identifier = sysid
            if seg_size != size or blcksz != PAGE_SIZE:
                raise WalCorruptError(f"segment size {seg_size} / block size {blcksz} in the "
                                      f"header do not match {size} / {PAGE_SIZE}",
                                      segment=where, lsn=lsn)
            header = LONG_HEADER
        elif info & XLP_LONG_HEADER:
            raise WalCorruptError("long page header in the middle of a segment",
                                  segment=where, lsn=lsn)
        return header, info, rem_len

    # -- records -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[XLogRecord]:
        return walk(self, None)

    def _first_record(self, pos: int) -> int:
        """Skip a continuation at the start of the first page read; where records begin."""
        header, info, rem_len = self._page(pos)
        p = pos + header
        if not info & XLP_FIRST_IS_CONTRECORD:
            return p
        while True:
            avail = PAGE_SIZE - (p % PAGE_SIZE)
            if rem_len <= avail:
                return p + _maxalign(rem_len)
            p = (p // PAGE_SIZE + 1) * PAGE_SIZE
            header, info, rem_len = self._page(p)
            if not info & XLP_FIRST_IS_CONTRECORD:
                return p + header
            p += header

    def _past_overwritten(self, pos: int) -> int:
        """Where records resume after the record at ``pos``, cut short by an overwritten
        contrecord: past the header of the page that says so."""
        pos = (pos // PAGE_SIZE + 1) * PAGE_SIZE
        while True:
            header, info, _ = self._page(pos)
            if info & XLP_FIRST_IS_OVERWRITE_CONTRECORD:
                return pos + header
            pos += PAGE_SIZE

    def _check_really_end(self, found: int, pos: int) -> None:
        """At an end-of-WAL condition: if valid WAL continues after it, this is corruption.

        ``found`` is where the end was detected, ``pos`` the start of the record being read
        (the LSN an error names).
        """
        size = self.segment_size
        nxt = (found // size + 1) * size
        segno = nxt // size
        if segno > self._max_segno:
            return
        try:
            self._page(nxt)
        except (EndOfWal, WalVersionError, WalCorruptError, WalTruncatedError, WalGapError):
            return  # the following segment is recycled or absent: a genuine end
        detail = "" if found == pos else f" while reading the record at {format_lsn(pos)}"
        raise WalCorruptError(f"WAL ends here ({self.end_reason}){detail} but valid WAL "
                              f"continues in the next segment ({self._where(nxt)})",
                              segment=self._where(found), lsn=found)

    def _where(self, lsn: int) -> str:
        """The file name of the segment holding ``lsn``, for error messages."""
        segno = lsn // self.segment_size
        tli = self._segno_tli.get(segno)
        if tli is None:
            return SegmentName(1, segno).name(self.segment_size)
        return self.source.describe(SegmentName(tli, segno))

    def _assemble(self, pos: int, tot_len: int, first: bytes) -> tuple[bytes, int] | None:
        """A record continued on later pages: its bytes (``first`` is the part on its own
        page) and where the next record starts; None when an overwritten contrecord ends it."""
        size = self.segment_size
        parts = [first]
        got = PAGE_SIZE - pos % PAGE_SIZE
        page = pos + got
        end_pos = page
        while got < tot_len:
            try:
                header, info, rem_len = self._page(page)
            except EndOfWal as exc:
                raise EndOfWal(f"record at {format_lsn(pos)} continues past the end of "
                               f"valid WAL ({exc.args[0]})", page) from None
            pview, pwhere = self._segment(page // size)
            poff = page % size
            if info & XLP_FIRST_IS_OVERWRITE_CONTRECORD:
                return None
            if not info & XLP_FIRST_IS_CONTRECORD:
                raise WalCorruptError(f"record at {format_lsn(pos)} ({tot_len} bytes) "
                                      "continues on a page without FIRST_IS_CONTRECORD",
                                      segment=pwhere, lsn=page)
            if rem_len != tot_len - got:
                raise WalCorruptError(f"continuation page says {rem_len} bytes remain, "
                                      f"the record needs {tot_len - got}", segment=pwhere,
                                      lsn=page)
            start = poff + header
            take = min(rem_len, PAGE_SIZE - header)
            if start + take > len(pview):
                raise EndOfWal(f"record at {format_lsn(pos)} is cut off by the end of "
                               "the file", page)
            parts.append(bytes(pview[start:start + take]))
            got += take
            end_pos = page + header + _maxalign(take)
            page += PAGE_SIZE
        return b"".join(parts), end_pos


class Sieve:
    """Which records a :class:`Walk` builds: ``wants`` is asked about each record from the
    start LSN on, checked (header, prev-link, CRC, block headers), and says whether to build
    it; what it sees of the record are the walk's fields (``lsn``, ``xid``, ``rmid``, ``info``,
    ``toplevel``, ``nblocks``, the first block's ``first_db`` and ``first_rel``, the main data
    at ``main`` in ``src``, ``main_len`` bytes...). This one builds every record; the scans'
    (:class:`cdclake.decoding.rmgrs.Decodable`, :class:`cdclake.spark.facts.FactCollector`)
    read most records past without a Python object built for them or their blocks."""

    def wants(self, walk: Walk) -> bool:
        return True


#: what :meth:`Walk._record` returns for a record it read past (its sieve did not want it)
PASSED = object()


class Walk:
    """The records of ``reader`` from its start LSN on, as :meth:`XLogReader.__iter__` gives
    them (every check, end and error of the reader's); with a ``sieve``, those it wants, the
    others checked and read past — a pass that wants a few records of a segment (a scan)
    costs the walk, not the records. An iterator rather than a generator: compiled, its state
    is C fields and its steps C methods (``_reader.pxd``)."""

    def __init__(self, reader: XLogReader, sieve: Sieve | None) -> None:
        self.reader = reader
        self.sieve = sieve
        self.started = False
        self.done = False
        self.pos = 0
        self.prev_lsn = 0
        self.next_lsn = 0
        self.size = 0
        self.has_start = reader.start_lsn is not None
        self.start = reader.start_lsn or 0
        self.has_end = reader.end_lsn is not None
        self.end = reader.end_lsn or 0
        # the record a sieve is asked about (_record)
        self.lsn = self.prev = 0
        self.xid = self.rmid = self.info = self.toplevel = self.first_db = self.first_rel = 0
        self.tot_len = self.nblocks = self.main = self.main_len = 0
        self.src: primitives.Bytes = b""

    def __iter__(self) -> Walk:
        return self

    def __next__(self) -> XLogRecord:
        rec = self._next()
        if rec is None:
            raise StopIteration
        return rec  # type: ignore[no-any-return]

    def _next(self) -> XLogRecord | None:
        """The next record, None at the end of WAL (or of the reader's LSN range)."""
        if self.done:
            return None
        self.done = True  # until a record is given: an error ends the walk too
        reader = self.reader
        pos = self.pos
        try:
            if not self.started:
                self.started = True
                pos = reader._plan()
                self.size = reader.segment_size
                pos = reader._first_record(pos)
            while True:
                if pos % PAGE_SIZE == 0:
                    header, info, _ = reader._page(pos)
                    if info & XLP_FIRST_IS_CONTRECORD and not (
                            info & XLP_FIRST_IS_OVERWRITE_CONTRECORD):
                        raise WalCorruptError("page starts with the continuation of a record "
                                              "that did not begin on the previous page",
                                              segment=reader._where(pos), lsn=pos)
                    pos += header
                if self.has_end and pos >= self.end:
                    reader.end_reason = "end LSN reached"
                    break
                visible = not self.has_start or pos >= self.start
                rec = self._read(pos, visible)
                if rec is None:  # an overwritten contrecord: restart at the next page
                    pos = reader._past_overwritten(pos)
                    self.prev_lsn = 0
                    continue
                self.prev_lsn = pos
                pos = self.next_lsn
                if rec is not PASSED and visible:
                    self.pos = pos
                    self.done = False
                    return rec  # type: ignore[return-value]
        except EndOfWal as stop:
            reader.end_reason = str(stop.args[0])
            reader._check_really_end(pos if stop.lsn is None else stop.lsn, pos)
        reader.end_of_wal = pos
        return None

    def _read(self, pos: int, visible: bool) -> object:
        """The record at ``pos`` (None: an overwritten contrecord ends it), or PASSED; where
        the next record starts in ``next_lsn``."""
        reader = self.reader
        size = self.size
        cached = reader._seg_cache  # the reader's segment, read here without a call
        if cached is None or cached[0] != pos // size:
            reader._segment(pos // size)
            cached = reader._seg_cache
            assert cached is not None
        view = cached[1]
        where = cached[2]
        off = pos % size
        n = len(view)
        if off + 4 > n:
            raise EndOfWal(f"end of segment file {where}")
        tot_len = primitives.u32(primitives.bytes_of(view), off, n)
        if tot_len == 0:
            raise EndOfWal(f"zero record length at {format_lsn(pos)}")
        if tot_len < RECORD_HEADER:
            raise WalCorruptError(f"invalid record length {tot_len} (at least "
                                  f"{RECORD_HEADER} expected)", segment=where, lsn=pos)
        if tot_len > 1 << 30:
            raise WalCorruptError(f"record length {tot_len} is impossibly large",
                                  segment=where, lsn=pos)
        page_left = PAGE_SIZE - off % PAGE_SIZE
        if tot_len <= page_left:
            if off + tot_len > n:
                raise EndOfWal(f"record at {format_lsn(pos)} is cut off by the end of the file")
            return self._record(pos, pos + _maxalign(tot_len), tot_len, view, off, where,
                                cached[3], visible)
        assembled = reader._assemble(pos, tot_len, bytes(view[off:off + page_left]))
        if assembled is None:
            return None
        data, end_pos = assembled
        return self._record(pos, end_pos, tot_len, data, 0, where, cached[3], visible)

    def _record(self, pos: int, end_pos: int, tot_len: int, src: primitives.Bytes, off: int,
                where: str, timeline: int, visible: bool) -> object:
        """The record of ``tot_len`` bytes at ``off`` in ``src`` (its segment's view, or the
        bytes it was assembled into) and starting in the segment of ``timeline``: header
        checks, CRC, then its body; PASSED for one the sieve does not want or not
        ``visible`` (before the start LSN)."""
        _tot, xid, prev, info, rmid, crc = primitives.record_header(src, off)
        prev_lsn = self.prev_lsn
        if prev_lsn and prev != prev_lsn:
            raise WalCorruptError(f"record's prev-link {format_lsn(prev)} does not point to "
                                  f"the previous record {format_lsn(prev_lsn)}",
                                  segment=where, lsn=pos)
        if rmid > RM_MAX_BUILTIN and rmid < RM_MIN_CUSTOM:
            raise WalCorruptError(f"invalid resource manager id {rmid}", segment=where, lsn=pos)
        if primitives.record_crc(src, off, tot_len) != crc:
            raise WalCorruptError("incorrect CRC-32C in record", segment=where, lsn=pos)
        if rmid == 0 and info & 0xF0 == XLOG_SWITCH:  # the rest of the segment is padding
            end_pos = (pos // self.size + 1) * self.size
        self.next_lsn = end_pos
        sieve = self.sieve
        if sieve is not None:
            if not visible:
                return PASSED
            (self.main, self.main_len, _origin, self.toplevel, self.nblocks, self.first_db,
             self.first_rel) = body(src, off, tot_len, pos, where, None)
            self.lsn, self.prev, self.xid, self.rmid, self.info = pos, prev, xid, rmid, info
            self.tot_len, self.src = tot_len, src
            if not sieve.wants(self):
                return PASSED
        blocks: list[BlockRef] = []
        main, main_len, origin, toplevel, _n, _db, _rel = body(src, off, tot_len, pos, where,
                                                              blocks)
        return primitives.new_record(pos, end_pos, prev, xid, rmid, info, tot_len, blocks,
                                     src[main:main + main_len], origin, toplevel, timeline,
                                     where)


def body(src: primitives.Bytes, base: int, tot_len: int, lsn: int, where: str,
         blocks: list[BlockRef] | None) -> tuple[int, int, int, int, int, int, int]:
    """DecodeXLogRecord over the record of ``tot_len`` bytes at ``base`` in ``src``: its block
    headers, then the payloads (image, data per block), appending the blocks to ``blocks``
    (None: the headers are checked, nothing is built — what a sieve is told). Returns where
    its main data is in ``src`` and how long, its replication origin, its top-level
    transaction (0: none said), how many blocks it has and its first block's database and
    relation."""
    b = primitives.bytes_of(src)
    end = base + tot_len
    p = base + RECORD_HEADER
    datatotal = 0
    main_len = 0
    origin = INVALID_REP_ORIGIN
    toplevel = INVALID_XID
    first_db = first_rel = 0
    last_loc: RelFileLocator | None = None
    last_id = -1
    # per block: its image's length (-1: none), its data's (compiled: a C array; a record has
    # 33 blocks at the most, its ids ascending up to XLR_MAX_BLOCK_ID)
    lens = [0] * 66
    nblocks = 0
    try:
        while end - p > datatotal:
            block_id = primitives.u8(b, p, end)
            p += 1
            if block_id == XLR_BLOCK_ID_DATA_SHORT:
                main_len = primitives.u8(b, p, end)
                p += 1
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_DATA_LONG:
                main_len = primitives.u32(b, p, end)
                p += 4
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_ORIGIN:
                origin = primitives.u16(b, p, end)
                p += 2
                continue
            if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
                toplevel = primitives.u32(b, p, end)
                p += 4
                continue
            if block_id > XLR_MAX_BLOCK_ID or block_id <= last_id:
                raise WalCorruptError(f"invalid block id {block_id}", segment=where, lsn=lsn)
            last_id = block_id
            flags = primitives.u8(b, p, end)
            dlen = primitives.u16(b, p + 1, end)
            p += 3
            if ((flags & BKPBLOCK_HAS_DATA) != 0) != (dlen > 0):
                raise WalCorruptError(f"block {block_id}: HAS_DATA does not match data length "
                                      f"{dlen}", segment=where, lsn=lsn)
            datatotal += dlen
            ilen = -1
            bimg_info = hole_off = hole_len = 0
            if flags & BKPBLOCK_HAS_IMAGE:
                bimg_len = primitives.u16(b, p, end)
                hole_off = primitives.u16(b, p + 2, end)
                bimg_info = primitives.u8(b, p + 4, end)
                p += 5
                if bimg_info & BKPIMAGE_HAS_HOLE and bimg_info & BKPIMAGE_COMPRESSED:
                    hole_len = primitives.u16(b, p, end)
                    p += 2
                elif bimg_info & BKPIMAGE_HAS_HOLE:
                    hole_len = PAGE_SIZE - bimg_len
                if ((bimg_info & BKPIMAGE_HAS_HOLE and (hole_off == 0 or hole_len == 0
                                                        or bimg_len == PAGE_SIZE))
                        or (not bimg_info & BKPIMAGE_HAS_HOLE and (hole_off or hole_len))
                        or (not bimg_info & BKPIMAGE_COMPRESSED and not bimg_info
                            & BKPIMAGE_HAS_HOLE and bimg_len != PAGE_SIZE)
                        or bimg_len > PAGE_SIZE):
                    raise WalCorruptError(f"block {block_id}: inconsistent image header "
                                          f"(len {bimg_len}, hole {hole_off}+{hole_len}, "
                                          f"info 0x{bimg_info:02X})", segment=where, lsn=lsn)
                ilen = bimg_len
                datatotal += bimg_len
            if flags & BKPBLOCK_SAME_REL:
                if nblocks == 0:
                    raise WalCorruptError(f"block {block_id}: SAME_REL without a previous "
                                          "relation", segment=where, lsn=lsn)
            else:
                if nblocks == 0:
                    first_db = primitives.u32(b, p + 4, end)
                    first_rel = primitives.u32(b, p + 8, end)
                if blocks is not None:
                    last_loc = primitives.locator(b, p, end)
                p += 12
            blkno = primitives.u32(b, p, end)
            p += 4
            if blocks is not None:
                blocks.append(primitives.new_block(block_id, flags, last_loc, blkno, bimg_info,
                                                   hole_off, hole_len))
            lens[2 * nblocks] = ilen
            lens[2 * nblocks + 1] = dlen
            nblocks += 1
    except IndexError as exc:
        raise WalCorruptError(f"record body is cut off ({exc})", segment=where,
                              lsn=lsn) from None
    if end - p != datatotal:
        raise WalCorruptError(f"record length {tot_len} does not match its headers "
                              f"({p - base} + {datatotal})", segment=where, lsn=lsn)
    if blocks is not None:
        for i in range(nblocks):
            k = lens[2 * i]
            image = None
            if k >= 0:
                image = src[p:p + k]
                p += k
            k = lens[2 * i + 1]
            data = None
            if k:
                data = src[p:p + k]
                p += k
            primitives.set_payloads(blocks[i], image, data)
    return end - main_len, main_len, origin, toplevel, nblocks, first_db, first_rel


def walk(reader: XLogReader, sieve: Sieve | None) -> Walk:
    """A :class:`Walk` over ``reader``'s records: where this file is compiled, the compiled
    class's (its twin, :func:`cdclake.native.twin`)."""
    return Walk(reader, sieve)


walk = native.twin(walk, "cdclake.wal._reader")
