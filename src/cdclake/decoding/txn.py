"""A (sub)transaction's buffered state in the reorder buffer (PostgreSQL's ReorderBufferTXN).

Apart from :mod:`cdclake.decoding.reorder` because that module is also compiled as itself
(``_reorder``, Cython's pure-Python mode): a class it defined would be another class in the
compiled copy, and the compiled ``txn`` would make TXNs of that one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cdclake.decoding.changes import Change
from cdclake.decoding.spill import read_changes


@dataclass(frozen=True, slots=True)
class Carried:
    """Changes of a transaction carried from an earlier batch, still in the store under
    ``key`` (:mod:`cdclake.decoding.carry`): fetched into ``path`` only when the transaction
    is streamed, and carried on by its key, not copied, while it stays open — a transaction
    open across many batches is not written again in each."""

    key: str
    path: Path
    get: Callable[[str, Path], None]

    def stream(self) -> Iterator[Change]:
        self.get(self.key, self.path)
        try:
            yield from read_changes(self.path)
        finally:
            self.path.unlink(missing_ok=True)


def local_path(entry: Path | Carried) -> Path:
    return entry.path if isinstance(entry, Carried) else entry


class TXN:
    """ReorderBufferTXN: one (sub)transaction's buffered state."""

    __slots__ = (
        "changes",
        "ddl",
        "first_lsn",
        "gid",
        "nspilled",
        "prepared",
        "size",
        "spill_files",
        "subxids",
        "toast_pending",
        "top",
        "xid",
    )

    def __init__(self, xid: int, first_lsn: int) -> None:
        self.xid = xid
        self.top: int = 0  #: parent xid when known to be a subtransaction
        self.first_lsn = first_lsn
        self.changes: list[Change] = []
        self.size = 0
        #: spill files in WAL order (one per segment the spilled changes came from), after
        #: the changes carried from earlier batches (negative keys)
        self.spill_files: dict[int, Path | Carried] = {}
        self.nspilled = 0
        self.subxids: list[int] = []
        self.prepared = False
        self.gid = ""
        #: dictionary messages (lsn, payload), kept in memory apart from the change stream so
        #: commit processing can apply them before replaying (possibly spilled) changes
        self.ddl: list[tuple[int, bytes]] = []
        #: a TOAST chunk was queued: the changes other decoders emit leave placeholders
        self.toast_pending = False

    @property
    def serialized(self) -> bool:
        return bool(self.spill_files)

    def stream(self) -> Iterator[Change]:
        """All changes of this (sub)transaction in LSN order: spilled ones first."""
        for entry in self.spill_files.values():
            yield from (entry.stream() if isinstance(entry, Carried) else read_changes(entry))
        yield from self.changes
