"""Carrying open transactions from one batch to the next.

A batch ends at a segment boundary, usually with transactions still running. Each one leaves
two things: its changes, as the bytes of a spill file (the format of
:mod:`cdclake.decoding.spill`, so restoring them is writing the bytes back to a file), and its
bookkeeping as JSON (:class:`OpenTxn`: subtransactions, prepare state, buffered DDL events).
The next batch restores them into an empty reorder buffer before it reads any record, so a
transaction open across the cut decodes exactly as in one batch. With the decoder's start-up
state (:mod:`cdclake.decoding.startup`) this is everything a continued decoder needs.

Where the bytes go is the caller's business: ``put``/``get`` callbacks name and fetch them
(the Spark job keeps them in the object store, ``spill/<batch>/...``). When several decoders
share a WAL and each emits only the transactions it owns (Spark partitions), only the owner
saves a transaction's changes; every decoder restores the bookkeeping (it needs the DDL events
to keep the same dictionary), the owner also the changes.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdclake.decoding.reorder import TXN, ReorderBuffer
from cdclake.decoding.spill import (
    MAGIC,
    encode_change,
    open_private,
    private_dir,
    spill_file_name,
)
from cdclake.decoding.walclass import PgClassRow, PgClassUpdate
from cdclake.errors import SpillError

#: key of restored spill files in TXN.spill_files: before every segment number, so changes
#: restored from the previous batch stream before those spilled in this one
RESTORED = -1


def encode_event(lsn: int, event: object) -> dict[str, Any]:
    """A buffered DDL event as JSON: a ``cdclake.ddl`` message, a pg_class row inserted, or
    one updated or deleted."""
    if isinstance(event, bytes | bytearray | memoryview):
        return {"lsn": lsn, "message": base64.b64encode(bytes(event)).decode()}
    if isinstance(event, PgClassRow):
        return {"lsn": lsn, "pg_class": dataclasses.asdict(event)}
    if isinstance(event, PgClassUpdate):
        return {"lsn": lsn, "pg_class_update": dataclasses.asdict(event)}
    raise SpillError(f"cannot carry catalog event {event!r} at {lsn} to the next batch")


def decode_event(d: dict[str, Any]) -> tuple[int, object]:
    if "message" in d:
        return int(d["lsn"]), base64.b64decode(d["message"])
    if "pg_class_update" in d:
        u = d["pg_class_update"]
        return int(d["lsn"]), PgClassUpdate(
            tuple(u["old"]), tuple(u["new"]) if u["new"] else None,  # type: ignore[arg-type]
            PgClassRow(**u["row"]) if u["row"] else None, tuple(u["filenode"]))
    return int(d["lsn"]), PgClassRow(**d["pg_class"])


@dataclass(frozen=True)
class OpenTxn:
    """Bookkeeping of one open (sub)transaction; ``spill`` is the store key of its changes."""

    xid: int
    top: int
    first_lsn: int
    subxids: tuple[int, ...]
    prepared: bool
    gid: str
    ddl: tuple[dict[str, Any], ...]
    spill: str | None
    changes: int

    @property
    def toplevel(self) -> int:
        return self.top or self.xid

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["subxids"] = list(self.subxids)
        d["ddl"] = list(self.ddl)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OpenTxn:
        return cls(int(d["xid"]), int(d["top"]), int(d["first_lsn"]),
                   tuple(int(x) for x in d["subxids"]), bool(d["prepared"]), str(d["gid"]),
                   tuple(d["ddl"]), d.get("spill"), int(d.get("changes", 0)))


def open_memberships(txns: Iterable[OpenTxn]) -> dict[int, int]:
    """subxid -> parent xid, as the open transactions carried from the last batch know it.

    A subtransaction named its top-level xid in an earlier batch (on its first record); its
    later records, in this batch, are routed by this. Both sides of the bookkeeping count: a
    subtransaction's ``top`` and a top-level transaction's ``subxids``.
    """
    out: dict[int, int] = {}
    for o in txns:
        if o.top:
            out[o.xid] = o.top
        for sub in o.subxids:
            if sub != o.xid:
                out[sub] = o.xid
    return out


#: stores one open transaction's changes (xid, first LSN, the spill file holding them);
#: returns their key
Put = Callable[[int, int, Path], str]
#: writes what is stored under a key to a new private file
Get = Callable[[str, Path], None]


def save_open(buffer: ReorderBuffer, owns: Callable[[int], bool], put: Put) -> list[OpenTxn]:
    """Store the changes of the open transactions this decoder owns; their bookkeeping.

    Each transaction's changes are streamed into one spill file in the buffer's spill
    directory and handed to ``put`` as a file: a transaction larger than memory stays out of
    it (:meth:`cdclake.archive.store.ObjectStore.put_file` streams it on)."""
    out = []
    for t in buffer.by_txn.values():
        top = t.top or t.xid
        if not owns(top):
            continue
        key = None
        n = 0
        if t.changes or t.spill_files:
            private_dir(buffer.spill_dir)
            path = buffer.spill_dir / f"carry-{spill_file_name(t.xid, t.first_lsn)}"
            try:
                with open_private(path, "wb") as f:
                    f.write(MAGIC)
                    for ch in t.stream():
                        f.write(encode_change(ch))
                        n += 1
                key = put(t.xid, t.first_lsn, path)
            finally:
                path.unlink(missing_ok=True)
        out.append(OpenTxn(t.xid, t.top, t.first_lsn, tuple(t.subxids), t.prepared, t.gid,
                           tuple(encode_event(lsn, e) for lsn, e in t.ddl), key, n))
    return out


def restore_open(buffer: ReorderBuffer, txns: list[OpenTxn], owns: Callable[[int], bool],
                 get: Get, spill_dir: Path) -> None:
    """Recreate the previous batch's open transactions in an empty reorder buffer."""
    for o in txns:
        t: TXN = buffer.txn(o.xid, o.first_lsn)
        t.top = o.top
        t.subxids = list(o.subxids)
        t.prepared = o.prepared
        t.gid = o.gid
        t.ddl = [decode_event(e) for e in o.ddl]  # type: ignore[misc]
        if o.spill and owns(o.toplevel):
            private_dir(spill_dir)
            path = spill_dir / spill_file_name(o.xid, o.first_lsn)
            get(o.spill, path)
            t.spill_files[RESTORED] = path
            t.nspilled = o.changes
