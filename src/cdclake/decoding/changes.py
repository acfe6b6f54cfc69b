"""ReorderBufferChange and the transaction facts handed to output plugins.

A :class:`Change` is what the decode stage queues into the reorder buffer (PostgreSQL's
``ReorderBufferChange``): the LSN of its record, an action, the relation's physical locator and
the old/new tuples as logged. Internal actions (speculative insert/confirm/abort, TOAST chunks)
never reach an output plugin; reassembly turns them into ordinary inserts or consumes them.
Slotted classes with positional construction keep the per-change cost low: a large
transaction queues millions of these.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.wal.record import RelFileLocator, WalTuple

# Change actions (ReorderBufferChangeType, plus TOAST_CHUNK: a TOAST relation insert).
INSERT = 0
UPDATE = 1
DELETE = 2
TRUNCATE = 3
MESSAGE = 4
SPEC_INSERT = 5
SPEC_CONFIRM = 6
SPEC_ABORT = 7
TOAST_CHUNK = 8
#: in place of a change another decoder of a parallel decode emits: no tuples, kept only where
#: TOAST chunks of its transaction are buffered, so reassembly releases them where the change
#: would have (:class:`~cdclake.decoding.decode.Decoder`, ``share``)
ELSEWHERE = 9

ACTION_NAMES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "MESSAGE", "SPEC_INSERT",
                "SPEC_CONFIRM", "SPEC_ABORT", "TOAST_CHUNK", "ELSEWHERE")

#: Fixed per-change cost counted against work_mem, like sizeof(ReorderBufferChange) plus the
#: tuple headers PostgreSQL allocates; the tuple bytes are added on top.
CHANGE_OVERHEAD = 96


class Change:
    """One queued change, in WAL order inside its (sub)transaction."""

    __slots__ = (
        "action",
        "clear_toast",
        "locator",
        "lsn",
        "new",
        "old",
        "origin",
        "payload",
        "seq",
    )

    def __init__(self, action: int, lsn: int, seq: int, locator: RelFileLocator | None,
                 old: WalTuple | None, new: WalTuple | None, clear_toast: bool,
                 origin: int, payload: object = None) -> None:
        self.action = action
        self.lsn = lsn
        #: position inside the record: multi-insert tuples share one LSN
        self.seq = seq
        self.locator = locator
        self.old = old
        self.new = new
        #: the creator of the tuple says reassembled TOAST chunks are no longer needed after it
        self.clear_toast = clear_toast
        self.origin = origin
        #: TRUNCATE: Truncate; MESSAGE: Message; TOAST_CHUNK: ToastChunk
        self.payload = payload

    def size(self) -> int:
        """Bytes counted against work_mem: :func:`change_size`."""
        return change_size(self)

    def __repr__(self) -> str:
        return (f"Change({ACTION_NAMES[self.action]}, lsn={self.lsn:X}, seq={self.seq}, "
                f"rel={self.locator})")


def change_size(change: Change) -> int:
    """Bytes ``change`` counts against work_mem (ReorderBufferChangeSize). A function of the
    module, compiled with it as ``cdclake.decoding._changes`` (``_changes.pxd``), so that the
    compiled reorder buffer counts a change in C."""
    n = CHANGE_OVERHEAD
    if change.old is not None:
        n += len(change.old.data)
    if change.new is not None:
        n += len(change.new.data)
    p = change.payload
    if p is not None:
        n += p.size()  # type: ignore[attr-defined]
    return n


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_seqs: bool

    def size(self) -> int:
        return 16 + 4 * len(self.relids)


@dataclass(frozen=True, slots=True)
class Message:
    prefix: str
    content: bytes
    transactional: bool

    def size(self) -> int:
        return len(self.prefix) + len(self.content) + 16


@dataclass(frozen=True, slots=True)
class ToastChunk:
    """One row of a TOAST relation: chunk ``seq`` of value ``value_id``."""

    value_id: int
    seq: int
    data: bytes

    def size(self) -> int:
        return len(self.data) + 16


@dataclass(slots=True)
class TxnInfo:
    """What output plugins learn about a transaction (ReorderBufferTXN's public part)."""

    xid: int
    first_lsn: int  #: LSN of its first queued change
    final_lsn: int  #: LSN of the commit (or commit-prepared) record
    end_lsn: int  #: LSN just past the commit record
    commit_time: int  #: µs since 2000-01-01 UTC (the origin's commit time when replicated)
    origin_id: int = 0
    origin_lsn: int = 0
    gid: str = ""  #: global transaction id when committed with COMMIT PREPARED
