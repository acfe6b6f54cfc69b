"""Stage 1 on Spark: which segments a batch reads, and parsing one segment inside a task.

A record belongs to the segment it starts in. A task reads its segment from the store and, for
a record that straddles the boundary, the head of the next one (the reader fetches later
segments lazily, only when a record continues there). A segment is read first
(:func:`scan_segment`) for the facts the driver needs: the subtransaction memberships and
large transactions that decide which partition decodes what, whether consecutive tasks join
up (prev-links), where WAL ended, and where the first full dictionary ``cdclake source
install`` wrote lies (a new stream without a start LSN starts there). Then every
reorder-buffer partition reads it again (:func:`task_records`) and feeds every record to its
decoder (:mod:`cdclake.spark.routing`). Every segment read is checked against the sha256 the
manifest recorded (:class:`~cdclake.archive.source.StoreSegmentSource`); the scan returns a
mismatch to the driver, which raises it.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from cdclake.archive.layout import Layout
from cdclake.archive.source import StoreSegmentSource
from cdclake.archive.store import ObjectStore
from cdclake.catalog.signing import DDL_PREFIX, open_signed
from cdclake.decoding.rmgrs import IGNORE, decodable, route_class
from cdclake.decoding.stripes import STRIPE_BITS
from cdclake.errors import SegmentDigestError
from cdclake.lsn import SegmentName
from cdclake.spark.facts import FactCollector, collector
from cdclake.wal.reader import XLogReader, walk
from cdclake.wal.record import (
    RM_LOGICALMSG_ID,
    XLogRecord,
)
from cdclake.wal.rmgr import logicalmsg


class StoreWindow:
    """A SegmentSource over the store that lists only the segments a task may read.

    It also reconciles :class:`StoreSegmentSource` (whose ``segment_size`` is a method) with
    the :class:`~cdclake.wal.source.SegmentSource` protocol (a property), which the reader uses.
    Pickles cheaply: the store drops its client, the segment list is a few names.
    """

    def __init__(self, store: ObjectStore, layout: Layout, segment_size: int,
                 segments: list[SegmentName], recent: RecentSegments | None = None) -> None:
        self._source = recent or RecentSegments(StoreSegmentSource(store, layout, segment_size))
        self._size = segment_size
        self._segments = list(segments)

    @property
    def segment_size(self) -> int:
        return self._size

    def list_segments(self) -> list[SegmentName]:
        return list(self._segments)

    def read_segment(self, segment: SegmentName) -> bytes:
        return self._source.read_segment(segment)

    def read_history(self, timeline: int) -> str | None:
        return self._source.source.read_history(timeline)

    def describe(self, segment: SegmentName) -> str:
        return self._source.source.describe(segment)


class RecentSegments:
    """The last two segments read, for the tasks one process reads one after the other: a
    task reads its segment and, for the record that straddles its end, the next one — the
    next task's own, which is then neither read nor checked against its sha256 again."""

    def __init__(self, source: StoreSegmentSource) -> None:
        self.source = source
        self._held: dict[SegmentName, bytes] = {}

    def read_segment(self, segment: SegmentName) -> bytes:
        data = self._held.get(segment)
        if data is None:
            data = self.source.read_segment(segment)
            self._held[segment] = data
            if len(self._held) > 2:
                del self._held[next(iter(self._held))]
        return data


@dataclass(frozen=True)
class SegmentTask:
    """A segment to read: records starting in ``[read_from, end)``."""

    segment: SegmentName
    read_from: int  #: the segment's start, or where the previous batch stopped inside it
    end: int  #: the next segment's start
    window: tuple[SegmentName, ...]  #: this segment and the archived ones after it


#: a transaction with this many bytes of changes in one segment is large: its changes may
#: be dealt out by stripes of WAL (:mod:`cdclake.spark.routing`)
LARGE_BYTES = 2 << STRIPE_BITS


@dataclass(frozen=True)
class SegmentFacts:
    """What routing needs to know from one segment, collected before the partitions read."""

    parent_of: dict[int, int]  #: subtransaction xid -> parent xid (maybe itself a subxact)
    #: xids with LARGE_BYTES of changes in the segment
    large: frozenset[int] = frozenset()
    #: xids whose changes cannot be split: with TOAST chunks, speculative inserts or new
    #: catalog rows (:mod:`cdclake.spark.routing`)
    unsplit: array = field(default_factory=lambda: array("I"))


@dataclass
class ParsedSegment:
    """What a task found in its segment, besides the records (a few numbers: it goes to the
    driver)."""

    segno: int
    version: int = 0  #: PostgreSQL major version from the page magic
    first_lsn: int | None = None  #: first record starting in the segment (after read_from)
    first_prev: int = 0  #: its prev-link: must be the previous task's last record
    last_lsn: int | None = None
    end_of_wal: int = 0  #: where the next record starts (past ``end`` if one straddles)
    end_reason: str = ""
    #: the first full-dictionary ``cdclake.ddl`` message of the database starting in the
    #: segment (its record's LSN), if any
    dictionary_lsn: int | None = None
    facts: SegmentFacts = field(default_factory=lambda: SegmentFacts({}))
    #: a segment the task read is not the one archived (its sha256): the error's message,
    #: which the driver raises (the scan stops there)
    damaged: str | None = None


def is_dictionary_message(rec: XLogRecord, db_oid: int, key: bytes) -> bool:
    """Whether ``rec`` is a full dictionary of database ``db_oid``: the transactional
    ``cdclake.ddl`` message, signed with ``key``, whose JSON says ``"kind": "dictionary"``,
    which ``cdclake source install`` emits (``cdclake.emit(cdclake.dictionary_json())``, at
    the top level of its transaction: the record's xid is the one it was signed for).

    Cheap for every other record: the rmgr id, then the message header and prefix; only the
    few ``cdclake.ddl`` messages of the database are authenticated and parsed as JSON. A
    forged or malformed payload is not a dictionary here (the decoder reports it when it
    applies the message).
    """
    if rec.rmid != RM_LOGICALMSG_ID or rec.info & 0xF0 != logicalmsg.XLOG_LOGICAL_MESSAGE:
        return False
    m = logicalmsg.parse(rec)
    if m.db_id != db_oid or not m.transactional or m.prefix != DDL_PREFIX:
        return False
    try:
        _xid8, body = open_signed(key, m.message, rec.xid)
        payload = json.loads(body)
    except ValueError:  # ForgedMessage is one
        return False
    return isinstance(payload, dict) and payload.get("kind") == "dictionary"


def scan_segments(tasks: Iterable[SegmentTask], store: ObjectStore, layout: Layout,
                  segment_size: int, db_oid: int, key: bytes) -> Iterator[ParsedSegment]:
    """:func:`scan_segment` of consecutive tasks, each segment read once."""
    recent = RecentSegments(StoreSegmentSource(store, layout, segment_size))
    for t in tasks:
        yield scan_segment(t, store, layout, segment_size, db_oid, key, recent)


def scan_segment(task: SegmentTask, store: ObjectStore, layout: Layout, segment_size: int,
                 db_oid: int, key: bytes, recent: RecentSegments | None = None
                 ) -> ParsedSegment:
    """What the task's range tells the driver: where it starts and ends, the routing facts,
    the first full dictionary. Only this summary leaves the task, not the records: the
    records are read again by :func:`task_records`, after the driver has what routes
    them. Parsing the segment twice costs less than keeping its records between the two
    stages (pickled Python objects, a multiple of the WAL's size, unpickled again).
    """
    reader = _reader(task, store, layout, segment_size, recent)
    out = ParsedSegment(task.segment.segno)
    facts = collector(db_oid)
    try:
        _scan(reader, out, facts, db_oid, key)
    except SegmentDigestError as exc:
        out.damaged = str(exc)
        return out
    out.version = reader.version
    out.end_of_wal = reader.end_of_wal
    out.end_reason = reader.end_reason
    out.facts = facts_of(facts)
    return out


def _scan(reader: XLogReader, out: ParsedSegment, facts: FactCollector, db_oid: int,
          key: bytes) -> None:
    """Every record ``reader`` reads into ``out`` (the first and last, the first full
    dictionary) and ``facts``, the walk's sieve: it builds only the transaction and message
    records, which :func:`take` reads, and takes the others' facts from what the walk tells
    it."""
    try:
        for rec in walk(reader, facts):
            take(rec, out, facts, db_oid, key, reader.version)
    finally:
        facts.flush()
        out.first_lsn, out.first_prev = facts.first_lsn, facts.first_prev
        out.last_lsn = facts.last_lsn


def take(rec: XLogRecord, out: ParsedSegment, facts: FactCollector, db_oid: int, key: bytes,
         version: int) -> None:
    """What one record tells the scan: whether it is the first full dictionary, and its
    routing facts."""
    if out.dictionary_lsn is None and is_dictionary_message(rec, db_oid, key):
        out.dictionary_lsn = rec.lsn
    kind = route_class(rec, db_oid)
    if kind != IGNORE or rec.toplevel_xid:
        facts.add(kind, rec, version)


def task_records(tasks: Iterable[SegmentTask], store: ObjectStore, layout: Layout,
                 segment_size: int, db_oid: int | None = None) -> Iterator[XLogRecord]:
    """Every record starting in the ranges of consecutive tasks, one at a time — with
    ``db_oid``, those a decoder of that database reads
    (:func:`~cdclake.decoding.rmgrs.decodable`): a task holds
    one record at a time, not its segment's (a segment of small records parses into hundreds
    of MB of Python objects). Their payloads are views of the segment, valid until the next
    record. Each segment is read once (:class:`RecentSegments`)."""
    recent = RecentSegments(StoreSegmentSource(store, layout, segment_size))
    for t in tasks:
        reader = _reader(t, store, layout, segment_size, recent)
        yield from reader if db_oid is None else decodable(reader, db_oid)


def _reader(task: SegmentTask, store: ObjectStore, layout: Layout, segment_size: int,
            recent: RecentSegments | None = None) -> XLogReader:
    source = StoreWindow(store, layout, segment_size, list(task.window), recent)
    # the window is on the plan's path; its newest timeline's history leads along it
    return XLogReader(source, start_lsn=task.read_from, end_lsn=task.end,
                      timeline=max(s.timeline for s in task.window))


def facts_of(facts: FactCollector) -> SegmentFacts:
    """The segment's facts ``facts`` gathered."""
    facts.flush()
    large = frozenset(x for x, size in facts.changes.items() if size >= LARGE_BYTES)
    return SegmentFacts(dict(facts.parent_of), large, array("I", sorted(facts.unsplit)))

