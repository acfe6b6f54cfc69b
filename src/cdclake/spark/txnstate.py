"""Carrying the reorder buffer and decoder state from one batch to the next.

Transactions still open when a batch ends are serialized to the store under
``spill/<batch>/xid-<XID>-lsn-<HI>-<LO>.spill`` (the spill-file format of
:mod:`cdclake.decoding.spill`: the same bytes a local spill file holds, so restoring is a
download) with their bookkeeping (subtransactions, prepare state, buffered DDL events) in
``state/progress.json``. The next batch restores them before reading any record, so a
transaction open across the cut decodes exactly as in one batch.

Only the owner partition of a transaction saves its changes; every partition restores the
bookkeeping (it needs the DDL events to keep the same dictionary), the owner also the changes.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectStore
from cdclake.decoding.decode import Decoder
from cdclake.decoding.reorder import TXN, ReorderBuffer
from cdclake.decoding.spill import MAGIC, encode_change, spill_file_name
from cdclake.decoding.walclass import PgClassRow
from cdclake.errors import SpillError

#: key of restored spill files in TXN.spill_files: before every segment number, so changes
#: restored from the previous batch stream before those spilled in this one
RESTORED = -1


def encode_event(lsn: int, event: object) -> dict[str, Any]:
    """A buffered DDL event as JSON: a ``cdclake.ddl`` message or a pg_class row."""
    if isinstance(event, bytes | bytearray | memoryview):
        return {"lsn": lsn, "message": base64.b64encode(bytes(event)).decode()}
    if isinstance(event, PgClassRow):
        return {"lsn": lsn, "pg_class": dataclasses.asdict(event)}
    raise SpillError(f"cannot carry catalog event {event!r} at {lsn} to the next batch")


def decode_event(d: dict[str, Any]) -> tuple[int, object]:
    if "message" in d:
        return int(d["lsn"]), base64.b64decode(d["message"])
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


def save_open(buffer: ReorderBuffer, owns: Callable[[int], bool], store: ObjectStore,
              layout: Layout, batch: str) -> list[OpenTxn]:
    """Upload the changes of the open transactions this partition owns; their bookkeeping."""
    out = []
    for t in buffer.by_txn.values():
        top = t.top or t.xid
        if not owns(top):
            continue
        key = None
        n = 0
        if t.changes or t.spill_files:
            parts = [MAGIC]
            for ch in t.stream():
                parts.append(encode_change(ch))
                n += 1
            key = layout.spill_key(batch, t.xid, t.first_lsn)
            store.put(key, b"".join(parts))
        out.append(OpenTxn(t.xid, t.top, t.first_lsn, tuple(t.subxids), t.prepared, t.gid,
                           tuple(encode_event(lsn, e) for lsn, e in t.ddl), key, n))
    return out


def restore_open(buffer: ReorderBuffer, txns: list[OpenTxn], owns: Callable[[int], bool],
                 store: ObjectStore, spill_dir: Path) -> None:
    """Recreate the previous batch's open transactions in an empty reorder buffer."""
    for o in txns:
        t: TXN = buffer.txn(o.xid, o.first_lsn)
        t.top = o.top
        t.subxids = list(o.subxids)
        t.prepared = o.prepared
        t.gid = o.gid
        t.ddl = [decode_event(e) for e in o.ddl]  # type: ignore[misc]
        if o.spill and owns(o.toplevel):
            spill_dir.mkdir(parents=True, exist_ok=True)
            path = spill_dir / spill_file_name(o.xid, o.first_lsn)
            path.write_bytes(store.get(o.spill))
            t.spill_files[RESTORED] = path
            t.nspilled = o.changes


@dataclass(frozen=True)
class DecoderState:
    """The decoder's memory of how decoding started (its incomplete-transaction check)."""

    clean_start: bool
    maybe_incomplete: tuple[int, ...] | None

    @classmethod
    def of(cls, decoder: Decoder) -> DecoderState:
        mi = decoder.maybe_incomplete
        return cls(decoder.clean_start,
                   None if mi is None else tuple(sorted(mi)))

    def apply(self, decoder: Decoder) -> None:
        """Continue a decoder: the first record it reads is no longer the first of the WAL."""
        decoder.maybe_incomplete = (None if self.maybe_incomplete is None
                                    else set(self.maybe_incomplete))
        # a continued decoder must not re-derive it from whatever record starts the next batch
        decoder.clean_start = self.clean_start
        decoder.stats.records = max(decoder.stats.records, 1)

    def to_json(self) -> dict[str, Any]:
        return {"clean_start": self.clean_start,
                "maybe_incomplete": (None if self.maybe_incomplete is None
                                     else list(self.maybe_incomplete))}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DecoderState:
        mi = d.get("maybe_incomplete")
        return cls(bool(d.get("clean_start")), None if mi is None else tuple(mi))
