"""Commit emit without the driver in the data path: executors write runs, then merge them.

Stage one (in each reorder-buffer partition): the Arrow plugin's row builder hands each full
part of a relation version's rows to :class:`RunParts`, which writes it to the store in
Arrow's IPC stream format (LZ4; ``.arrows``) under ``changes/<batch>/g<G>/_runs/p<partition>/``
(``g<G>``: the decode lease generation, :mod:`cdclake.spark.job`). A partition emits its
transactions in commit order, each one's rows in stream order, so each partition's parts of
a version are one *run* sorted by the stream's key (``_commit_lsn``, ``_lsn``, ``_seq``).

Stage two (one task per relation version, :func:`merge_runs`): the version's stream is the
merge of its runs by that key. A transaction is in one run, or, split by stripes of WAL
(:mod:`cdclake.spark.routing`), in several, each holding some of its rows. The task streams
the runs part by part — each round takes, from every run, the rows up to the lowest key any
run has loaded last, and orders them by the key — and writes the version's parts, of at most
``rows_per_part`` rows and about ``bytes_per_part`` bytes of Arrow data each, with the names
the local Arrow plugin gives them (:func:`cdclake.decoding.plugins.arrow.part_path`): the
batch holds the rows a single-process decode writes for the same WAL, in the same order.
Memory per task is one part per run plus one part being filled, in bytes as well as in rows;
the driver receives keys, counts and first rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cdclake import parquet
from cdclake.archive.store import ObjectStore
from cdclake.catalog.model import RelationVersion
from cdclake.decoding import stream
from cdclake.decoding.plugins.arrow import part_path, version_dir

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
    parquet.write_table(table, sink)
    return sink.getvalue().to_pybytes()


#: runs live from a partition's write to the merge of the same batch, read once: Arrow's own
#: IPC format, LZ4-compressed, costs a fraction of Parquet's encoding and statistics
_RUN_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def run_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_RUN_OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_run(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.BufferReader(data)).read_all()


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
        key = f"{self.prefix}{version_dir(rel)}/run-{index:05d}.arrows"
        self.store.put(key, run_bytes(table))
        run = self._runs.get(id(rel))
        if run is None:
            run = self._runs[id(rel)] = VersionRun(rel, _first_key(table))
        run.keys.append(key)
        run.rows += table.num_rows
        return key

    def runs(self) -> list[VersionRun]:
        return list(self._runs.values())


class _RunReader:
    """One run read a part at a time: the rows not yet taken, by stream key."""

    def __init__(self, store: ObjectStore, keys: list[str]) -> None:
        self.store = store
        self.keys = list(reversed(keys))
        self.table: pa.Table | None = None
        self.commits = self.lsns = self.seqs = np.empty(0, dtype=np.int64)
        self.offset = 0
        self._load()

    def _load(self) -> None:
        self.table = None
        while self.keys and self.table is None:
            table = read_run(self.store.get(self.keys.pop()))
            if table.num_rows:
                self.table = table
                self.commits, self.lsns, self.seqs = _key_columns(table)
                self.offset = 0

    @property
    def last(self) -> RowKey:
        """The stream key of the loaded part's last row."""
        return int(self.commits[-1]), int(self.lsns[-1]), int(self.seqs[-1])

    def take_through(self, limit: RowKey) -> pa.Table:
        """The rows from here whose key is at most ``limit``; the next part is loaded when
        this one is used up."""
        assert self.table is not None
        at = self.offset
        c, lsn, q = self.commits[at:], self.lsns[at:], self.seqs[at:]
        commit, limit_lsn, seq = limit
        upto = (c < commit) | ((c == commit) & ((lsn < limit_lsn) | ((lsn == limit_lsn)
                                                                     & (q <= seq))))
        end = at + int(np.count_nonzero(upto))  # the rows are sorted: a prefix
        piece = self.table.slice(at, end - at)
        self.offset = end
        if self.offset == len(self.commits):
            self._load()
        return piece


def _key_columns(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (table.column(stream.COMMIT_LSN).to_numpy(), table.column(stream.LSN).to_numpy(),
            table.column(stream.SEQ).to_numpy())


def _in_stream_order(pieces: list[pa.Table]) -> pa.Table:
    """Pieces of different runs as one table in stream order: each piece is in it, so a
    stable sort by the key is."""
    if len(pieces) == 1:
        return pieces[0]
    table = pa.concat_tables(pieces)
    commits, lsns, seqs = _key_columns(table)
    return table.take(np.lexsort((seqs, lsns, commits)))


def merge_runs(store: ObjectStore, root: str, relation: RelationVersion,
               runs: list[list[str]], rows_per_part: int = stream.ROWS_PER_PART,
               bytes_per_part: int = stream.BYTES_PER_PART) -> MergedVersion:
    """Stage two for one relation version: ``runs`` (each a list of part keys, sorted by
    stream key) merged into the version's parts under ``root`` (the batch prefix)."""
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
        # every row up to the lowest last-loaded key can go now: any row still unread in a
        # run comes later in the stream. Each round uses up at least one loaded part.
        limit = min(r.last for r in readers)
        pieces = [p for p in (r.take_through(limit) for r in readers) if p.num_rows]
        readers = [r for r in readers if r.table is not None]
        piece = _in_stream_order(pieces)
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
