"""Carrying open transactions from one batch to the next.

A batch ends at a segment boundary, usually with transactions still running. Each one leaves
two things: its changes, as the bytes of spill files (the format of
:mod:`cdclake.decoding.spill`, so restoring them is writing the bytes back to a file), and its
bookkeeping as JSON (:class:`OpenTxn`: subtransactions, prepare state, buffered DDL events).
The next batch restores them into an empty reorder buffer before it reads any record, so a
transaction open across the cut decodes exactly as in one batch. With the decoder's start-up
state (:mod:`cdclake.decoding.startup`) this is everything a continued decoder needs.

A transaction's changes are carried as a list of stored objects, one per batch it was open in,
oldest first: what earlier batches stored is restored as a reference
(:class:`~cdclake.decoding.txn.Carried`), fetched only when the transaction commits, and
carried on by its key; each batch stores only the changes it added. A bulk load open across
twenty batches is written twenty times once, not 1 + 2 + … + 20 times.

Where the bytes go is the caller's business: ``put``/``get`` callbacks name and fetch them
(the Spark job keeps them in the object store, ``spill/<batch>/...``). When several decoders
share a WAL and each emits only the transactions it owns (Spark partitions), only the owner
saves a transaction's changes; every decoder restores the bookkeeping (it needs the DDL events
to keep the same dictionary), the owner also the changes.

A transaction the decoders split (a Spark job's large transaction, dealt out by stripes of
WAL) is carried in parts: each decoder saves the changes it holds, as part ``part`` of
``parts``, and in the next batch each takes its own part back while the transaction stays
split the same way. When it cannot (the next batch finds TOAST chunks or new catalog rows in
it, or a different number of decoders), one decoder takes every part and reunites them
(:func:`reunite`): the parts hold disjoint records, except the ones every part buffers
(TRUNCATE, transactional messages), which are kept once.
"""

from __future__ import annotations

import base64
import dataclasses
import heapq
import itertools
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from cdclake.decoding.changes import Change
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.spill import (
    MAGIC,
    encode_change,
    open_private,
    private_dir,
    read_changes,
    spill_file_name,
)
from cdclake.decoding.txn import TXN, Carried
from cdclake.decoding.walclass import PgClassRow, PgClassUpdate
from cdclake.errors import SpillError

#: key of a reunited spill file in TXN.spill_files: before every segment number, so changes
#: restored from the previous batch stream before those spilled in this one (carried objects
#: restored as they are take -n … -1, in order)
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
    """Bookkeeping of one open (sub)transaction; ``spill`` are the store keys of its changes,
    oldest first (one per batch that added some)."""

    xid: int
    top: int
    first_lsn: int
    subxids: tuple[int, ...]
    prepared: bool
    gid: str
    ddl: tuple[dict[str, Any], ...]
    spill: tuple[str, ...]
    changes: int
    #: of a split transaction: which part of how many (the decoder's index, their number),
    #: and the LSN its changes are split from (before it, they are all in the owner's part)
    part: int | None = None
    parts: int = 0
    since: int = 0
    #: its changes cannot be split (TOAST chunks, speculative inserts or new catalog rows
    #: were seen in it), however large it grows: said by the job (:mod:`cdclake.spark.routing`)
    unsplit: bool = False

    @property
    def toplevel(self) -> int:
        return self.top or self.xid

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["subxids"] = list(self.subxids)
        d["ddl"] = list(self.ddl)
        d["spill"] = list(self.spill)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OpenTxn:
        part = d.get("part")
        spill = d.get("spill") or ()  # one key, or none, as a version carrying one object said
        return cls(int(d["xid"]), int(d["top"]), int(d["first_lsn"]),
                   tuple(int(x) for x in d["subxids"]), bool(d["prepared"]), str(d["gid"]),
                   tuple(d["ddl"]), (spill,) if isinstance(spill, str) else tuple(spill),
                   int(d.get("changes", 0)),
                   None if part is None else int(part), int(d.get("parts", 0)),
                   # carried by a version that did not say: never split, to be safe
                   int(d.get("since", 0)), bool(d.get("unsplit", True)))


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


#: stores one open transaction's changes (xid, first LSN, its part or None, the spill file
#: holding them); returns their key
Put = Callable[[int, int, int | None, Path], str]
#: writes what is stored under a key to a new private file
Get = Callable[[str, Path], None]
#: of a top-level xid: this decoder's part of it, the number of parts and the LSN it is split
#: from, or None (whole)
PartOf = Callable[[int], tuple[int, int, int] | None]


def save_open(buffer: ReorderBuffer, owns: Callable[[int], bool], put: Put,
              part_of: PartOf | None = None) -> list[OpenTxn]:
    """Store the changes of the open transactions this decoder owns; their bookkeeping.

    The changes a transaction was restored with stay where they are (their keys are carried
    on); what this batch added — spilled or in memory — is streamed into one spill file in the
    buffer's spill directory and handed to ``put`` as a file: a transaction larger than memory
    stays out of it (:meth:`cdclake.archive.store.ObjectStore.put_file` streams it on). Of a
    transaction ``part_of`` says is split, what this decoder holds is its part."""
    out = []
    for t in buffer.by_txn.values():
        top = t.top or t.xid
        if not owns(top):
            continue
        part, parts, since = (part_of(top) if part_of is not None else None) or (None, 0, 0)
        keys = [f.key for f in t.spill_files.values() if isinstance(f, Carried)]
        local = [f for f in t.spill_files.values() if not isinstance(f, Carried)]
        if local or t.changes:
            private_dir(buffer.spill_dir)
            path = buffer.spill_dir / f"carry-{spill_file_name(t.xid, t.first_lsn)}"
            try:
                with open_private(path, "wb") as f:
                    f.write(MAGIC)
                    # spilled changes are in the carried format already: their bytes are
                    # copied, not decoded and encoded again
                    for spilled in local:
                        _copy_entries(spilled, f)
                    for ch in t.changes:
                        f.write(encode_change(ch))
                keys.append(put(t.xid, t.first_lsn, part, path))
            finally:
                path.unlink(missing_ok=True)
        out.append(OpenTxn(t.xid, t.top, t.first_lsn, tuple(t.subxids), t.prepared, t.gid,
                           tuple(encode_event(lsn, e) for lsn, e in t.ddl), tuple(keys),
                           t.nspilled + len(t.changes), part, parts, since))
    return out


def _copy_entries(path: Path, out: BinaryIO) -> None:
    """The entries of spill file ``path``, as bytes, onto ``out``."""
    with open(path, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise SpillError(f"spill file {path} is not a cdclake spill file (bad magic)")
        shutil.copyfileobj(f, out, 1 << 20)


def restore_open(buffer: ReorderBuffer, txns: list[OpenTxn], keeps: Callable[[OpenTxn], bool],
                 get: Get, spill_dir: Path) -> None:
    """Recreate the previous batch's open transactions in an empty reorder buffer: the
    bookkeeping of all, the changes of those ``keeps`` says this decoder takes — as
    references to their stored objects, fetched at commit (parts of one transaction, several
    of them, are fetched now and reunited)."""
    taken: dict[int, list[OpenTxn]] = {}
    for o in txns:
        t: TXN = buffer.txn(o.xid, o.first_lsn)
        t.top = o.top
        t.subxids = list(o.subxids)
        t.prepared = o.prepared
        t.gid = o.gid
        t.ddl = [decode_event(e) for e in o.ddl]  # type: ignore[misc]
        if o.spill and keeps(o):
            taken.setdefault(o.xid, []).append(o)
    for xid, parts in taken.items():
        private_dir(spill_dir)
        t = buffer.by_txn[xid]
        name = spill_file_name(xid, t.first_lsn)
        t.nspilled = sum(o.changes for o in parts)
        if len(parts) == 1:
            keys = parts[0].spill
            for i, key in enumerate(keys):
                t.spill_files[i - len(keys)] = Carried(key, spill_dir / f"carried{i}-{name}",
                                                       get)
            continue
        files = [spill_dir / f"part{o.part}-{name}" for o in parts]
        try:
            for o, f in zip(parts, files, strict=True):
                _fetch(o.spill, get, f)
            t.nspilled = reunite(files, spill_dir / name)
        finally:
            for f in files:
                f.unlink(missing_ok=True)
        t.spill_files[RESTORED] = spill_dir / name


def _fetch(keys: Iterable[str], get: Get, path: Path) -> None:
    """The stored objects ``keys`` as one spill file at ``path``, in order."""
    with open_private(path, "wb") as f:
        f.write(MAGIC)
        for key in keys:
            one = path.with_name(f"fetch-{path.name}")
            try:
                get(key, one)
                _copy_entries(one, f)
            finally:
                one.unlink(missing_ok=True)


def _tagged(part: int, path: Path) -> Iterator[tuple[int, int, Change]]:
    for ch in read_changes(path):
        yield ch.lsn, part, ch


def reunite(parts: list[Path], path: Path) -> int:
    """One spill file at ``path`` of a split transaction's parts (each in LSN order): their
    changes merged by LSN, a record every part holds (TRUNCATE, a transactional message:
    the same LSN in several parts) kept once. Returns the number of changes written."""
    n = 0
    with open_private(path, "wb") as f:
        f.write(MAGIC)
        streams = [_tagged(i, p) for i, p in enumerate(parts)]
        merged = heapq.merge(*streams, key=lambda e: e[0])  # stable: part order at an LSN
        for _lsn, group in itertools.groupby(merged, key=lambda e: e[0]):
            entries = list(group)
            first = entries[0][1]  # the changes of one record: from one part only
            for _, i, ch in entries:
                if i == first:
                    f.write(encode_change(ch))
                    n += 1
    return n
