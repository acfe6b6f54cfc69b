"""The handoff from a table's initial snapshot to its change stream, by transaction visibility.

A mirror filled by an initial snapshot (:mod:`cdclake.snapshot.driver`) holds exactly the rows
the source's MVCC snapshot saw. A transaction's changes are already in it if and only if the
transaction is visible in that snapshot; so the merge skips the changes of visible
transactions and applies every other one in commit order — with no replication slot and no
LSN guesswork. Commit LSNs alone cannot decide it: a transaction can write its commit record
before the snapshot's LSN and still be running in the snapshot's eyes (it leaves the proc
array a moment later), and one open across the snapshot or prepared before it commits after.

PostgreSQL's snapshot is 64-bit (``pg_current_snapshot()``: xmin, xmax, xip); the WAL carries
32-bit xids. A WAL xid is widened to the 64-bit one nearest the snapshot's ``xmax`` — exact
across an epoch boundary, because every transaction whose visibility is in question committed
before ``end_lsn`` (the WAL position read right after the snapshot was taken) and so lies
within PostgreSQL's own wraparound horizon (2^31) of that snapshot. A change committed at or
after ``end_lsn`` belongs to a transaction that had not committed when the snapshot was taken:
never visible, whatever its xid, so xids far in the future never need widening.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdclake.errors import LakeError

#: the mirror table property holding the facts of its last initial snapshot (JSON)
PROPERTY = "cdclake.snapshot"

EPOCH = 1 << 32
HALF = 1 << 31


def widen(xid: int, reference: int) -> int:
    """The 64-bit transaction id with low 32 bits ``xid`` nearest to ``reference``."""
    full = (reference & ~(EPOCH - 1)) | (xid & (EPOCH - 1))
    if full > reference + HALF:
        full -= EPOCH
    elif full < reference - HALF:
        full += EPOCH
    return full


@dataclass(frozen=True)
class SnapshotFacts:
    """What a mirror records of the snapshot its rows were copied in."""

    id: str  #: the exported snapshot's name (pg_export_snapshot)
    lsn: int  #: the WAL insert position read before the snapshot was taken
    end_lsn: int  #: the WAL insert position read after it was taken
    xmin: int  #: 64-bit, as pg_current_snapshot() gives them
    xmax: int
    xip: tuple[int, ...]
    taken_at_us: int  #: the snapshot transaction's start, µs since 1970 (UTC)
    run: str = ""  #: the cdclake snapshot run that copied the rows (names its files)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_running", frozenset(self.xip))

    def visible(self, full_xid: int) -> bool:
        """PostgreSQL's XidInMVCCSnapshot, negated, for a top-level 64-bit xid."""
        if full_xid < self.xmin:
            return True
        if full_xid >= self.xmax:
            return False
        return full_xid not in self._running  # type: ignore[attr-defined]

    def in_snapshot(self, commit_lsn: int, xid: int) -> bool:
        """Are the changes of top-level transaction ``xid`` (32-bit, from the WAL), committed
        at ``commit_lsn``, already in the snapshot's rows?"""
        if commit_lsn >= self.end_lsn:
            return False
        return self.visible(widen(xid, self.xmax))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "lsn": self.lsn, "end_lsn": self.end_lsn, "xmin": self.xmin,
                "xmax": self.xmax, "xip": list(self.xip), "taken_at_us": self.taken_at_us,
                "run": self.run}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SnapshotFacts:
        return cls(str(d["id"]), int(d["lsn"]), int(d["end_lsn"]), int(d["xmin"]),
                   int(d["xmax"]), tuple(int(x) for x in d["xip"]), int(d["taken_at_us"]),
                   str(d.get("run", "")))


def in_snapshot_arrow(facts: SnapshotFacts, commit_lsn: pa.ChunkedArray | pa.Array,
                      xid: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """:meth:`SnapshotFacts.in_snapshot` over Arrow columns (the Arrow merge's changes)."""
    full = pc.add(pc.cast(xid, pa.int64()), facts.xmax & ~(EPOCH - 1))  # widen()
    full = pc.if_else(pc.greater(full, facts.xmax + HALF), pc.subtract(full, EPOCH),
                      pc.if_else(pc.less(full, facts.xmax - HALF), pc.add(full, EPOCH), full))
    running = pc.is_in(full, value_set=pa.array(facts.xip, pa.int64()))
    visible = pc.or_(pc.less(full, facts.xmin),
                     pc.and_(pc.less(full, facts.xmax), pc.invert(running)))
    return pc.and_(pc.less(commit_lsn, facts.end_lsn), visible)


def facts_of(properties: dict[str, str], table: str) -> SnapshotFacts | None:
    """A mirror's snapshot facts from its table properties (None: never snapshotted)."""
    raw = properties.get(PROPERTY)
    if raw is None:
        return None
    try:
        return SnapshotFacts.from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise LakeError(f"mirror of {table}: table property {PROPERTY} is not valid snapshot "
                        f"facts ({exc}); take the snapshot again (cdclake snapshot --tables "
                        f"{table})") from exc


def property_value(facts: SnapshotFacts) -> str:
    return json.dumps(facts.to_json(), sort_keys=True, separators=(",", ":"))
