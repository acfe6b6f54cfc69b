"""The stream's progress: where the next batch starts and what it inherits.

Written last, atomically, after the batch's changes, spill objects and dictionary are in the
store: until it is written the previous progress stands, so a batch interrupted at any point
is decoded again from the same state, under the same name, with the same result.

Saving is a compare-and-swap: the progress after batch ``seq`` is created once, with
create-if-absent, as ``state/progress/<seq>.json``, and the newest of those is the stream's
progress. Of two runs that decoded the same batch from the same progress only the first
commits; the second gets :class:`~cdclake.errors.ConcurrentRunError`. The progress names the
decode lease generation that wrote it (:mod:`cdclake.archive.lease`): its objects — the
batch's parts and manifest, spill files, dictionary — are those under that generation's keys,
and no other run's writes touch them. Old entries of the log are deleted, so a run that
decoded batch ``seq`` from a progress read long ago can create an entry again; when the log
already holds entries more than :data:`KEEP` past it, it removes the entry and gets
:class:`~cdclake.errors.ConcurrentRunError` too.
``state/progress.json`` repeats the newest for people and ``cdclake status``; a stream saved
before the log existed is read from it.

Format 2 added the timeline the stream follows and the LSN of the last record read (the next
batch's first record must link back to it). Progress of format 1 is read as it is: its
timeline is the one its last segment's name says, its last record is unknown, so the first
batch after the upgrade checks no prev-link; that batch saves format 2, which cdclake before
format 2 refuses to read (it would not follow the timeline).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cdclake.archive.layout import Layout
from cdclake.archive.manifest import utc_now_iso
from cdclake.archive.store import ObjectStore
from cdclake.decoding.carry import OpenTxn
from cdclake.decoding.startup import Startup
from cdclake.errors import ConcurrentRunError, ObjectNotFound, StoreError
from cdclake.lsn import parse_segment_name

FORMAT = 2
#: formats this cdclake reads (see the module doc)
READS = (1, 2)


@dataclass
class Progress:
    """The stream's decoding position after the last finished batch."""

    seq: int  #: number of batches decoded so far
    batch: str  #: name of the last batch (its changes/, spill/ and dictionary objects)
    next_lsn: int  #: where the next batch starts reading (a record or segment start)
    last_segment: str  #: the last segment the batch read
    #: the timeline whose history the batch followed (the newest timeline it knew of)
    timeline: int
    #: LSN of the last record the batch read; None for progress saved by format 1
    last_lsn: int | None
    confirmed_lsn: int  #: commit LSN of the last transaction emitted (ever)
    restart_lsn: int  #: oldest first LSN of an open transaction (else next_lsn)
    start_lsn: int  #: transactions committing before this are never emitted (first batch)
    db_oid: int
    version: int  #: PostgreSQL major version of the WAL
    segment_size: int
    dictionary_key: str  #: the dictionary valid at next_lsn
    startup: Startup  #: the decoder's start-up state, carried to the next batch
    open_txns: list[OpenTxn] = field(default_factory=list)
    updated_at: str = ""
    #: the decode lease generation whose objects the batch is (None: saved before there were)
    generation: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "seq": self.seq, "batch": self.batch, "next_lsn": self.next_lsn,
            "last_segment": self.last_segment, "timeline": self.timeline,
            "last_lsn": self.last_lsn, "confirmed_lsn": self.confirmed_lsn,
            "restart_lsn": self.restart_lsn, "start_lsn": self.start_lsn, "db_oid": self.db_oid,
            "version": self.version, "segment_size": self.segment_size,
            "dictionary_key": self.dictionary_key, "decoder": self.startup.to_json(),
            "open_txns": [t.to_json() for t in self.open_txns],
            "updated_at": self.updated_at or utc_now_iso(), "generation": self.generation,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Progress:
        if d.get("format") not in READS:
            raise StoreError(f"state/progress.json has format {d.get('format')!r}; this "
                             f"cdclake reads formats {', '.join(map(str, READS))}")
        size = int(d["segment_size"])
        if d["format"] == 1:  # the timeline of its last segment, no last record
            timeline, last_lsn = parse_segment_name(d["last_segment"], size).timeline, None
        else:
            timeline = int(d["timeline"])
            last_lsn = None if d["last_lsn"] is None else int(d["last_lsn"])
        return cls(
            seq=int(d["seq"]), batch=str(d["batch"]), next_lsn=int(d["next_lsn"]),
            last_segment=str(d["last_segment"]), timeline=timeline, last_lsn=last_lsn,
            confirmed_lsn=int(d["confirmed_lsn"]),
            restart_lsn=int(d["restart_lsn"]), start_lsn=int(d["start_lsn"]),
            db_oid=int(d["db_oid"]), version=int(d["version"]),
            segment_size=size, dictionary_key=str(d["dictionary_key"]),
            startup=Startup.from_json(d["decoder"]),
            open_txns=[OpenTxn.from_json(t) for t in d.get("open_txns", ())],
            updated_at=str(d.get("updated_at", "")),
            generation=None if d.get("generation") is None else int(d["generation"]))


def _logged(store: ObjectStore, layout: Layout) -> list[str]:
    return [o.key for o in store.list(layout.progress_log_prefix()) if o.key.endswith(".json")]


def load_progress(store: ObjectStore, layout: Layout) -> Progress | None:
    """The saved progress, or None before the first batch."""
    logged = _logged(store, layout)
    key = max(logged) if logged else layout.progress_key()
    try:
        data = store.get(key)
    except ObjectNotFound:
        return None
    try:
        return Progress.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{store.url(key)} is not valid progress state ({exc}); restore it "
                         "or remove it to decode the stream from the start") from exc


def committed(store: ObjectStore, layout: Layout, seq: int) -> Progress | None:
    """The progress committed after batch ``seq``, if the log still holds it."""
    try:
        return Progress.from_json(json.loads(store.get(layout.progress_log_key(seq))))
    except ObjectNotFound:
        return None


#: how many saved progress entries stay in the log behind the newest
KEEP = 10


def save_progress(store: ObjectStore, layout: Layout, progress: Progress) -> None:
    """Commit ``progress`` unless another run committed batch ``progress.seq`` first."""
    data = json.dumps(progress.to_json(), indent=1, sort_keys=True).encode()
    key = layout.progress_log_key(progress.seq)
    lost = (f"another run committed batch {progress.batch} (number {progress.seq}) of "
            f"{store.url(layout.progress_log_prefix())} first; this run's copy of it is dropped")
    if not store.put(key, data, if_absent=True):
        raise ConcurrentRunError(lost)
    # an entry is deleted once KEEP newer ones exist: one past those means this one was
    # deleted long ago and created again (a run that commits right after this one does not
    # get that far ahead)
    if max(_logged(store, layout)) > layout.progress_log_key(progress.seq + KEEP):
        store.delete(key)
        raise ConcurrentRunError(lost)
    store.put(layout.progress_key(), data)
    for seq in range(max(1, progress.seq - KEEP - 5), progress.seq - KEEP):
        store.delete(layout.progress_log_key(seq))
