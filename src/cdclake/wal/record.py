"""What the XLogReader yields: one assembled, CRC-checked record with its block references.

Layouts from access/xlogrecord.h (identical in PostgreSQL 15-18). Payload fields are
``bytes``/``memoryview`` slices of the record; anything a later stage keeps past the record's
life (tuples in the reorder buffer) is copied out by the rmgr parsers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

# XLogRecord.xl_info: low nibble is for the record machinery, high nibble for the rmgr.
XLR_INFO_MASK = 0x0F
XLR_RMGR_INFO_MASK = 0xF0

# Block reference ids
XLR_MAX_BLOCK_ID = 32
XLR_BLOCK_ID_DATA_SHORT = 255
XLR_BLOCK_ID_DATA_LONG = 254
XLR_BLOCK_ID_ORIGIN = 253
XLR_BLOCK_ID_TOPLEVEL_XID = 252

# XLogRecordBlockHeader.fork_flags
BKPBLOCK_FORK_MASK = 0x0F
BKPBLOCK_HAS_IMAGE = 0x10
BKPBLOCK_HAS_DATA = 0x20
BKPBLOCK_WILL_INIT = 0x40
BKPBLOCK_SAME_REL = 0x80

# XLogRecordBlockImageHeader.bimg_info
BKPIMAGE_HAS_HOLE = 0x01
BKPIMAGE_APPLY = 0x02
BKPIMAGE_COMPRESS_PGLZ = 0x04
BKPIMAGE_COMPRESS_LZ4 = 0x08
BKPIMAGE_COMPRESS_ZSTD = 0x10
BKPIMAGE_COMPRESSED = BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD

FORK_NAMES = ("main", "fsm", "vm", "init")
INVALID_REP_ORIGIN = 0
INVALID_XID = 0

# Resource manager ids (access/rmgrlist.h) and pg_waldump's names for them.
RM_XLOG_ID = 0
RM_XACT_ID = 1
RM_SMGR_ID = 2
RM_CLOG_ID = 3
RM_DBASE_ID = 4
RM_TBLSPC_ID = 5
RM_MULTIXACT_ID = 6
RM_RELMAP_ID = 7
RM_STANDBY_ID = 8
RM_HEAP2_ID = 9
RM_HEAP_ID = 10
RM_BTREE_ID = 11
RM_HASH_ID = 12
RM_GIN_ID = 13
RM_GIST_ID = 14
RM_SEQ_ID = 15
RM_SPGIST_ID = 16
RM_BRIN_ID = 17
RM_COMMIT_TS_ID = 18
RM_REPLORIGIN_ID = 19
RM_GENERIC_ID = 20
RM_LOGICALMSG_ID = 21

class RelFileLocator(NamedTuple):
    """RelFileNode (15) / RelFileLocator (16+): tablespace, database, relfilenode."""

    spc: int
    db: int
    rel: int

    def __str__(self) -> str:
        return f"{self.spc}/{self.db}/{self.rel}"


@dataclass(slots=True)
class BlockRef:
    """One block reference of a record (DecodedBkpBlock)."""

    id: int
    rlocator: RelFileLocator
    fork: int
    blkno: int
    flags: int  #: fork_flags byte
    data: bytes | memoryview | None = None  #: the block's registered data (HAS_DATA)
    #: full-page image as stored in the record (maybe compressed; hole removed)
    image: bytes | memoryview | None = None
    bimg_info: int = 0
    hole_offset: int = 0
    hole_length: int = 0

    @property
    def has_image(self) -> bool:
        return self.image is not None

    @property
    def apply_image(self) -> bool:
        return bool(self.bimg_info & BKPIMAGE_APPLY)

    @property
    def will_init(self) -> bool:
        return bool(self.flags & BKPBLOCK_WILL_INIT)

    @property
    def image_len(self) -> int:
        """Bytes the image takes in the record (pg_waldump's fpi_len contribution)."""
        return 0 if self.image is None else len(self.image)



@dataclass(slots=True)
class XLogRecord:
    """An assembled record: header fields, block references, main data."""

    lsn: int  #: where the record starts (ReadRecPtr)
    end_lsn: int  #: where the next record starts (EndRecPtr)
    prev: int
    xid: int
    rmid: int
    info: int
    tot_len: int
    blocks: list[BlockRef] = field(default_factory=list)
    main_data: bytes | memoryview = b""
    origin: int = INVALID_REP_ORIGIN
    toplevel_xid: int = INVALID_XID  #: set on a subtransaction's first record (wal_level logical)
    timeline: int = 1
    segment: str = ""  #: file name of the segment the record starts in (for error messages)

    @property
    def rmgr_info(self) -> int:
        """The rmgr's own bits of xl_info (opcode and flags)."""
        return self.info & XLR_RMGR_INFO_MASK

    @property
    def fpi_len(self) -> int:
        return sum(b.image_len for b in self.blocks)

    @property
    def rec_len(self) -> int:
        """pg_waldump's "rec" length: tot_len minus block images."""
        return self.tot_len - self.fpi_len

    def block(self, block_id: int) -> BlockRef | None:
        for b in self.blocks:
            if b.id == block_id:
                return b
        return None



# heap tuple header size on disk (offsetof(HeapTupleHeaderData, t_bits))
SIZEOF_HEAP_TUPLE_HEADER = 23


@dataclass(slots=True)
class WalTuple:
    """A heap tuple as logged in WAL: xl_heap_header fields plus the bytes after the header.

    The WAL omits the first 23 bytes of the on-disk tuple (xmin, xmax, cid, ctid, infomask2,
    infomask, t_hoff) and logs infomask2/infomask/t_hoff in xl_heap_header instead.  ``data``
    starts where the on-disk tuple's null bitmap (t_bits) starts, so attribute data begins at
    ``t_hoff - 23`` inside ``data``.
    """

    infomask2: int
    infomask: int
    t_hoff: int
    data: bytes

    @property
    def natts(self) -> int:
        return self.infomask2 & 0x07FF

    @property
    def has_nulls(self) -> bool:
        return bool(self.infomask & 0x0001)

    @property
    def has_external(self) -> bool:
        return bool(self.infomask & 0x0004)

    @property
    def data_offset(self) -> int:
        return self.t_hoff - SIZEOF_HEAP_TUPLE_HEADER
