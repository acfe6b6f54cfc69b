"""Commit emit without the driver in the data path: executors write runs, then merge them.

Stage one (in each reorder-buffer partition): the Arrow plugin's row builder hands each full
part of a relation version's rows to :class:`RunParts`, which writes it to the store as
Parquet under ``changes/<batch>/_runs/<attempt>/p<partition>/``. A partition emits its
transactions in commit order, so each partition's parts of a version are one sorted *run*.

Stage two (one task per relation version, :func:`merge_runs`): transactions are owned by
exactly one partition, so a commit LSN is in one run only, and the version's stream order
(``_commit_lsn``, ``_lsn``, ``_seq``) is a merge of its runs by commit LSN. The task streams
the runs part by part — each round takes, from every run, the rows up to the lowest commit LSN
any run has loaded, and orders them with one stable sort — and writes the version's parts, of
at most ``rows_per_part`` rows and about ``bytes_per_part`` bytes of Arrow data each, with the
names the local Arrow plugin gives them (:func:`cdclake.decoding.plugins.arrow.part_path`):
the batch holds the rows a single-process decode writes for the same WAL, in the same order.
Memory per task is one part per run plus one part being filled, in bytes as well as in rows;
the driver receives keys, counts and first rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cdclake.archive.store import ObjectStore
from cdclake.catalog.model import RelationVersion
from cdclake.decoding import stream
from cdclake.decoding.plugins.arrow import part_path

#: (commit LSN, LSN, seq) of a row: the stream's order
RowKey = tuple[int, int, int]


@dataclass
class VersionRun:
    """A relation version's rows from one partition: store keys of its parts, in order."""

    relation: RelationVersion
    first: RowKey  #: stream key of its first row
    keys: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass(frozen=True)
class MergedVersion:
    """A relation version as the batch holds it: part paths relative to the batch root."""

    relation: RelationVersion
    first: RowKey
    paths: list[str]
    rows: int


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def _first_key(table: pa.Table) -> RowKey:
    return (table.column(stream.COMMIT_LSN)[0].as_py(), table.column(stream.LSN)[0].as_py(),
            table.column(stream.SEQ)[0].as_py())


class RunParts:
    """A row sink (executor side) writing each part to the store under ``prefix``."""

    def __init__(self, store: ObjectStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix
        self._runs: dict[int, VersionRun] = {}  # id(RelationVersion) -> run

    def part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        key = self.prefix + part_path(rel, index)
        self.store.put(key, parquet_bytes(table))
        run = self._runs.get(id(rel))
        if run is None:
            run = self._runs[id(rel)] = VersionRun(rel, _first_key(table))
        run.keys.append(key)
        run.rows += table.num_rows
        return key

    def runs(self) -> list[VersionRun]:
        return list(self._runs.values())


class _RunReader:
    """One run read a part at a time: the rows not yet taken, by commit LSN."""

    def __init__(self, store: ObjectStore, keys: list[str]) -> None:
        self.store = store
        self.keys = list(reversed(keys))
        self.table: pa.Table | None = None
        self.commits = np.empty(0, dtype=np.int64)
        self.offset = 0
        self._load()

    def _load(self) -> None:
        self.table = None
        while self.keys and self.table is None:
            table = pq.read_table(pa.BufferReader(self.store.get(self.keys.pop())))
            if table.num_rows:
                self.table = table
                self.commits = table.column(stream.COMMIT_LSN).to_numpy()
                self.offset = 0

    @property
    def last(self) -> int:
        """The commit LSN of the loaded part's last row."""
        return int(self.commits[-1])

    def take_through(self, limit: int) -> pa.Table:
        """The rows from here whose commit LSN is at most ``limit``; the next part is loaded
        when this one is used up."""
        assert self.table is not None
        end = self.offset + int(np.searchsorted(self.commits[self.offset:], limit, side="right"))
        piece = self.table.slice(self.offset, end - self.offset)
        self.offset = end
        if self.offset == len(self.commits):
            self._load()
        return piece


def _in_commit_order(pieces: list[pa.Table]) -> pa.Table:
    """Pieces of different runs as one table in commit order. A commit LSN is in one run
    only and each piece is in stream order, so a stable sort on it is the stream's order."""
    if len(pieces) == 1:
        return pieces[0]
    table = pa.concat_tables(pieces)
    order = np.argsort(table.column(stream.COMMIT_LSN).to_numpy(), kind="stable")
    return table.take(order)


def merge_runs(store: ObjectStore, root: str, relation: RelationVersion,
               runs: list[list[str]], rows_per_part: int = stream.ROWS_PER_PART,
               bytes_per_part: int = stream.BYTES_PER_PART) -> MergedVersion:
    """Stage two for one relation version: ``runs`` (each a list of part keys, sorted by
    commit LSN) merged into the version's parts under ``root`` (the batch prefix)."""
    readers = [r for r in (_RunReader(store, keys) for keys in runs) if r.table is not None]
    paths: list[str] = []
    pending: list[pa.Table] = []
    buffered = pending_bytes = total = 0
    first: RowKey | None = None

    def write(table: pa.Table) -> None:
        path = part_path(relation, len(paths))
        store.put(root + path, parquet_bytes(table))
        paths.append(path)

    while readers:
        # every row up to the lowest last-loaded commit LSN can go now: any row still unread
        # in a run commits later (a commit cut by a part boundary continues in its own run,
        # and comes first in the next round). Each round uses up at least one loaded part.
        limit = min(r.last for r in readers)
        pieces = [p for p in (r.take_through(limit) for r in readers) if p.num_rows]
        readers = [r for r in readers if r.table is not None]
        piece = _in_commit_order(pieces)
        if first is None:
            first = _first_key(piece)
        pending.append(piece)
        buffered += piece.num_rows
        pending_bytes += piece.nbytes
        total += piece.num_rows
        while buffered >= rows_per_part or pending_bytes >= bytes_per_part:
            table = pa.concat_tables(pending)
            n = min(rows_per_part, max(1, buffered * bytes_per_part // max(1, pending_bytes)))
            write(table.slice(0, n))
            rest = table.slice(n)
            pending, buffered, pending_bytes = [rest], rest.num_rows, rest.nbytes
    if buffered:
        write(pa.concat_tables(pending))
    assert first is not None, "a run without rows"
    return MergedVersion(relation, first, paths, total)
