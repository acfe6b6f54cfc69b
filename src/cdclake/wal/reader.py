"""XLogReader: segment bytes -> assembled, CRC-checked WAL records (PostgreSQL 15-18).

Layouts from access/xlog_internal.h and access/xlogrecord.h (docs/architecture.md). Records are
8-aligned, may be split across pages and segments (every later page starts with a header whose
FIRST_IS_CONTRECORD flag and rem_len say how much of the record follows), and carry a CRC-32C
over their payload then their header. The reader tells an *end of WAL* (zeros where a record
should start, a recycled segment whose pages carry another LSN, the end of the last segment)
from *corruption* (bad CRC, broken prev-link, a continuation that does not continue, a
segment missing between two present ones): the first ends iteration, the second raises an
error naming the segment file and LSN.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c

from cdclake import native
from cdclake.errors import WalCorruptError, WalGapError, WalTruncatedError, WalVersionError
from cdclake.lsn import SegmentName, TimelineSwitch, format_lsn, parse_history
from cdclake.wal.record import (
    BKPBLOCK_HAS_DATA,
    BKPBLOCK_HAS_IMAGE,
    BKPBLOCK_SAME_REL,
    BKPIMAGE_COMPRESSED,
    BKPIMAGE_HAS_HOLE,
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
_REC = struct.Struct("<IIQBBxxI")  # tot_len, xid, prev, info, rmid, (2 pad), crc
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_BLK = struct.Struct("<BH")  # fork_flags, data_length
_IMG = struct.Struct("<HHB")  # bimg_len, hole_offset, bimg_info
_LOC = struct.Struct("<III")


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


class _EndOfWal(Exception):
    """Internal: valid WAL ends here (reason in args[0]).

    ``lsn`` is where the end was found when that is past the record being read (a record
    continuing into a segment that is absent or recycled): whether valid WAL resumes after
    the end must be judged from there, not from the record's start.
    """

    def __init__(self, reason: str, lsn: int | None = None) -> None:
        super().__init__(reason)
        self.lsn = lsn


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
            raise _EndOfWal(f"no segment {name}")
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

        Raises _EndOfWal for pages that are not (yet) part of this WAL stream.
        """
        size = self.segment_size
        view, where = self._segment(lsn // size)
        off = lsn % size
        if off + SHORT_HEADER > len(view):
            raise _EndOfWal(f"end of segment file {where}")
        magic, info, _tli, pageaddr, rem_len = _PAGE.unpack_from(view, off)
        if magic == 0 and pageaddr == 0:
            raise _EndOfWal(f"zeroed page at {format_lsn(lsn)}")
        if self.magic == 0:
            version = MAGIC_VERSIONS.get(magic)
            if version is None:
                raise WalVersionError(f"unknown WAL page magic 0x{magic:04X} (cdclake reads "
                                      "PostgreSQL 15-18: 0xD110, 0xD113, 0xD116, 0xD118)",
                                      segment=where, lsn=lsn)
            self.magic, self.version = magic, version
        if pageaddr != lsn:
            raise _EndOfWal(f"page at {format_lsn(lsn)} has pageaddr {format_lsn(pageaddr)} "
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
        pos = self._plan()
        size = self.segment_size
        prev_lsn = 0
        start = self.start_lsn
        end = self.end_lsn
        try:
            pos = self._first_record(pos)
            while True:
                if pos % PAGE_SIZE == 0:
                    header, info, _ = self._page(pos)
                    if info & XLP_FIRST_IS_CONTRECORD and not (
                            info & XLP_FIRST_IS_OVERWRITE_CONTRECORD):
                        raise WalCorruptError("page starts with the continuation of a record "
                                              "that did not begin on the previous page",
                                              segment=self._where(pos), lsn=pos)
                    pos += header
                if end is not None and pos >= end:
                    self.end_reason = "end LSN reached"
                    break
                rec = self._read_record(pos, prev_lsn)
                if rec is None:  # an overwritten contrecord: restart at the next page
                    pos = (pos // PAGE_SIZE + 1) * PAGE_SIZE
                    while True:
                        header, info, _ = self._page(pos)
                        if info & XLP_FIRST_IS_OVERWRITE_CONTRECORD:
                            pos += header
                            break
                        pos += PAGE_SIZE
                    prev_lsn = 0
                    continue
                prev_lsn = rec.lsn
                if rec.rmid == 0 and rec.info & 0xF0 == XLOG_SWITCH:
                    # The rest of the segment is padding.
                    rec.end_lsn = (rec.lsn // size + 1) * size
                if start is None or rec.lsn >= start:
                    yield rec
                pos = rec.end_lsn
        except _EndOfWal as stop:
            self.end_reason = str(stop.args[0])
            self._check_really_end(pos if stop.lsn is None else stop.lsn, pos)
        self.end_of_wal = pos

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
        except (_EndOfWal, WalVersionError, WalCorruptError, WalTruncatedError, WalGapError):
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

    def _read_record(self, pos: int, prev_lsn: int) -> XLogRecord | None:
        size = self.segment_size
        view, where = self._segment(pos // size)
        off = pos % size
        page_left = PAGE_SIZE - off % PAGE_SIZE
        if off + 4 > len(view):
            raise _EndOfWal(f"end of segment file {where}")
        tot_len = _U32.unpack_from(view, off)[0]
        if tot_len == 0:
            raise _EndOfWal(f"zero record length at {format_lsn(pos)}")
        if tot_len < RECORD_HEADER:
            raise WalCorruptError(f"invalid record length {tot_len} (at least "
                                  f"{RECORD_HEADER} expected)", segment=where, lsn=pos)
        if tot_len > 1 << 30:
            raise WalCorruptError(f"record length {tot_len} is impossibly large",
                                  segment=where, lsn=pos)
        if tot_len <= page_left:
            if off + tot_len > len(view):
                raise _EndOfWal(f"record at {format_lsn(pos)} is cut off by the end of the file")
            data: bytes | memoryview = view[off:off + tot_len]
            end_pos = pos + _maxalign(tot_len)
        else:
            assembled = self._assemble(pos, tot_len, bytes(view[off:off + page_left]))
            if assembled is None:
                return None
            data, end_pos = assembled
        _tot, xid, prev, info, rmid, crc = _REC.unpack_from(data, 0)
        if prev_lsn and prev != prev_lsn:
            raise WalCorruptError(f"record's prev-link {format_lsn(prev)} does not point to "
                                  f"the previous record {format_lsn(prev_lsn)}",
                                  segment=where, lsn=pos)
        if rmid > RM_MAX_BUILTIN and rmid < RM_MIN_CUSTOM:
            raise WalCorruptError(f"invalid resource manager id {rmid}", segment=where, lsn=pos)
        if crc32c.crc32c(data[:20], crc32c.crc32c(data[RECORD_HEADER:])) != crc:
            raise WalCorruptError("incorrect CRC-32C in record", segment=where, lsn=pos)
        rec = XLogRecord(pos, end_pos, prev, xid, rmid, info, tot_len,
                         timeline=self._segno_tli.get(pos // size, 1), segment=where)
        _decode_body(rec, data, where)
        return rec

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
            except _EndOfWal as exc:
                raise _EndOfWal(f"record at {format_lsn(pos)} continues past the end of "
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
                raise _EndOfWal(f"record at {format_lsn(pos)} is cut off by the end of "
                                "the file", page)
            parts.append(bytes(pview[start:start + take]))
            got += take
            end_pos = page + header + _maxalign(take)
            page += PAGE_SIZE
        return b"".join(parts), end_pos


def _decode_body(rec: XLogRecord, data: bytes | memoryview, where: str) -> None:
    """DecodeXLogRecord: block headers, then payloads (image, data per block), main data."""
    tot = rec.tot_len
    p = RECORD_HEADER
    datatotal = 0
    main_len = 0
    blocks = rec.blocks
    last_loc: RelFileLocator | None = None
    last_id = -1
    try:
        while tot - p > datatotal:
            block_id = data[p]
            p += 1
            if block_id == XLR_BLOCK_ID_DATA_SHORT:
                main_len = data[p]
                p += 1
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_DATA_LONG:
                main_len = _U32.unpack_from(data, p)[0]
                p += 4
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_ORIGIN:
                rec.origin = _U16.unpack_from(data, p)[0]
                p += 2
                continue
            if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
                rec.toplevel_xid = _U32.unpack_from(data, p)[0]
                p += 4
                continue
            if block_id > XLR_MAX_BLOCK_ID or block_id <= last_id:
                raise WalCorruptError(f"invalid block id {block_id}", segment=where,
                                      lsn=rec.lsn)
            last_id = block_id
            flags, dlen = _BLK.unpack_from(data, p)
            p += 3
            has_data = bool(flags & BKPBLOCK_HAS_DATA)
            if has_data != (dlen > 0):
                raise WalCorruptError(f"block {block_id}: HAS_DATA does not match data length "
                                      f"{dlen}", segment=where, lsn=rec.lsn)
            datatotal += dlen
            blk = BlockRef(block_id, RelFileLocator(0, 0, 0), flags & 0x0F, 0, flags)
            blk.data = dlen  # type: ignore[assignment]  # length for now, bytes below
            if flags & BKPBLOCK_HAS_IMAGE:
                bimg_len, hole_off, bimg_info = _IMG.unpack_from(data, p)
                p += 5
                if bimg_info & BKPIMAGE_HAS_HOLE and bimg_info & BKPIMAGE_COMPRESSED:
                    hole_len = _U16.unpack_from(data, p)[0]
                    p += 2
                elif bimg_info & BKPIMAGE_HAS_HOLE:
                    hole_len = PAGE_SIZE - bimg_len
                else:
                    hole_len = 0
                if ((bimg_info & BKPIMAGE_HAS_HOLE and (hole_off == 0 or hole_len == 0
                                                        or bimg_len == PAGE_SIZE))
                        or (not bimg_info & BKPIMAGE_HAS_HOLE and (hole_off or hole_len))
                        or (not bimg_info & BKPIMAGE_COMPRESSED and not bimg_info
                            & BKPIMAGE_HAS_HOLE and bimg_len != PAGE_SIZE)
                        or bimg_len > PAGE_SIZE):
                    raise WalCorruptError(f"block {block_id}: inconsistent image header "
                                          f"(len {bimg_len}, hole {hole_off}+{hole_len}, "
                                          f"info 0x{bimg_info:02X})", segment=where,
                                          lsn=rec.lsn)
                blk.bimg_info = bimg_info
                blk.hole_offset = hole_off
                blk.hole_length = hole_len
                blk.image = bimg_len  # type: ignore[assignment]  # length for now
                datatotal += bimg_len
            if flags & BKPBLOCK_SAME_REL:
                if last_loc is None:
                    raise WalCorruptError(f"block {block_id}: SAME_REL without a previous "
                                          "relation", segment=where, lsn=rec.lsn)
                blk.rlocator = last_loc
            else:
                last_loc = blk.rlocator = RelFileLocator(*_LOC.unpack_from(data, p))
                p += 12
            blk.blkno = _U32.unpack_from(data, p)[0]
            p += 4
            blocks.append(blk)
        if tot - p != datatotal:
            raise WalCorruptError(f"record length {tot} does not match its headers "
                                  f"({p} + {datatotal})", segment=where, lsn=rec.lsn)
        for blk in blocks:
            if blk.image is not None:
                n = blk.image  # type: ignore[assignment]
                blk.image = data[p:p + n]  # type: ignore[index]
                p += n  # type: ignore[operator]
            n = blk.data  # type: ignore[assignment]
            if n:
                blk.data = data[p:p + n]  # type: ignore[index]
                p += n  # type: ignore[operator]
            else:
                blk.data = None
        rec.main_data = data[p:p + main_len]
    except (struct.error, IndexError) as exc:
        raise WalCorruptError(f"record body is cut off ({exc})", segment=where,
                              lsn=rec.lsn) from None


_decode_body = native.twin(_decode_body, "cdclake.wal._reader")
XLogReader._read_record = native.twin(  # type: ignore[method-assign]
    XLogReader._read_record, "cdclake.wal._reader")
XLogReader.__iter__ = native.twin(  # type: ignore[method-assign]
    XLogReader.__iter__, "cdclake.wal._reader")
