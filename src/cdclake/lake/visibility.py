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

The rule (:func:`in_snapshot`) is one of the merge's rules (:mod:`cdclake.lake.rules`): the
replay asks it of a change, the columnar merge of a batch's Arrow columns, the Spark merge
of Spark columns.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from cdclake.errors import LakeError
from cdclake.lake.rules import PY, Dialect

#: the mirror table property holding the facts of its last initial snapshot (JSON)
PROPERTY = "cdclake.snapshot"

EPOCH = 1 << 32
HALF = 1 << 31


def widen(d: Dialect, xid: Any, reference: int) -> Any:
    """The 64-bit transaction id with low 32 bits ``xid`` nearest to ``reference``."""
    full = d.add(xid, reference & ~(EPOCH - 1))
    return d.where(d.gt(full, reference + HALF), d.sub(full, EPOCH),
                   d.where(d.lt(full, reference - HALF), d.add(full, EPOCH), full))


def visible(d: Dialect, facts: SnapshotFacts, full_xid: Any) -> Any:
    """PostgreSQL's XidInMVCCSnapshot, negated, for a top-level 64-bit xid."""
    return d.or_(d.lt(full_xid, facts.xmin),
                 d.and_(d.lt(full_xid, facts.xmax),
                        d.not_(d.isin(full_xid, facts.running))))


def in_snapshot(d: Dialect, facts: SnapshotFacts, commit_lsn: Any, xid: Any) -> Any:
    """Are the changes of top-level transaction ``xid`` (32-bit, from the WAL; in Arrow, as
    int64), committed at ``commit_lsn``, already in the snapshot's rows? Not when it committed
    at or after ``end_lsn``; else when the snapshot saw it."""
    return d.and_(d.lt(commit_lsn, facts.end_lsn), visible(d, facts, widen(d, xid, facts.xmax)))


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

    @functools.cached_property
    def running(self) -> frozenset[int]:
        """``xip`` as a set."""
        return frozenset(self.xip)

    def in_snapshot(self, commit_lsn: int, xid: int) -> bool:
        """:func:`in_snapshot` of one change."""
        return bool(in_snapshot(PY, self, commit_lsn, xid))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "lsn": self.lsn, "end_lsn": self.end_lsn, "xmin": self.xmin,
                "xmax": self.xmax, "xip": list(self.xip), "taken_at_us": self.taken_at_us,
                "run": self.run}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SnapshotFacts:
        return cls(str(d["id"]), int(d["lsn"]), int(d["end_lsn"]), int(d["xmin"]),
                   int(d["xmax"]), tuple(int(x) for x in d["xip"]), int(d["taken_at_us"]),
                   str(d.get("run", "")))


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
