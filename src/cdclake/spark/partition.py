"""Stages 2-6 in one Spark partition: decode, buffer, reassemble and collect owned rows.

Every partition runs the same code as a local decode (:mod:`cdclake.decoding.session`) over
the records routed to it in LSN order: its own transactions' changes plus the broadcast
records, so each keeps the same dictionary. Only transactions it owns are replayed; their rows
are collected per relation version (the Arrow plugin's row building, without writing files)
and returned to the driver, which orders them by commit LSN and writes the batch.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectStore
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.decoding import stream
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.decode import Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.plugins.arrow import ArrowChanges
from cdclake.decoding.reassembly import Replayer
from cdclake.decoding.reorder import ReorderBuffer, clean_spill_dir
from cdclake.decoding.walclass import PgClassTracker
from cdclake.spark.routing import owner
from cdclake.spark.txnstate import DecoderState, OpenTxn, restore_open, save_open
from cdclake.wal.record import XLogRecord

#: (commit LSN, LSN, seq) of a row: the stream's order
RowKey = tuple[int, int, int]


class OwnedReplay:
    """The decoder's Replay for one partition: catalog changes always, emission if owned."""

    def __init__(self, replayer: Replayer, index: int, partitions: int) -> None:
        self.replayer = replayer
        self.index = index
        self.partitions = partitions
        self.last_commit = 0

    def owns(self, xid: int) -> bool:
        return owner(xid, self.partitions) == self.index

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None:
        self.replayer.apply_catalog(events, info)

    def replay(self, info: TxnInfo, changes: object) -> None:
        if self.owns(info.xid):
            self.replayer.replay(info, changes)  # type: ignore[arg-type]
            self.last_commit = max(self.last_commit, info.final_lsn)

    def message(self, lsn: int, prefix: str, content: bytes) -> None:
        if self.index == 0:  # non-transactional: once, not once per partition
            self.replayer.message(lsn, prefix, content)


class RowCollector(ArrowChanges):
    """The Arrow plugin, keeping each full buffer as an Arrow table instead of a file."""

    def __init__(self, types: Mapping[int, TypeInfo], rows_per_part: int) -> None:
        super().__init__(pafs.LocalFileSystem(), "", "", types, rows_per_part=rows_per_part)
        self._tables: dict[int, tuple[RelationVersion, list[pa.Table]]] = {}

    def _write_part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        self._tables.setdefault(id(rel), (rel, []))[1].append(table)
        return f"part-{index}"

    def versions(self) -> list[VersionRows]:
        for buf in self._order:
            self._flush(buf)
        out = []
        for rel, tables in self._tables.values():
            first = tables[0]
            key = (first.column(stream.COMMIT_LSN)[0].as_py(), first.column(stream.LSN)[0].as_py(),
                   first.column(stream.SEQ)[0].as_py())
            out.append(VersionRows(rel, key, tables))
        return out


@dataclass
class VersionRows:
    """A relation version's rows from one partition, in that partition's commit order."""

    relation: RelationVersion
    first: RowKey
    tables: list[pa.Table]


@dataclass
class PartitionContext:
    """What every partition gets from the driver (pickled into the task)."""

    partitions: int
    batch: str
    db_oid: int
    start_lsn: int
    version: int
    segment_size: int
    work_mem: int
    tables: frozenset[str]
    rows_per_part: int
    dictionary: dict[str, Any]
    decoder: DecoderState | None
    open_txns: list[OpenTxn]
    store: ObjectStore
    layout: Layout
    spill_dir: str | None  #: local parent for spill files; None = the system temp dir
    #: a new stream started at the install's full dictionary: no change recorded before this
    #: LSN is queued (:class:`~cdclake.decoding.decode.Decoder`); 0 with an explicit start LSN
    skip_before: int = 0


@dataclass
class PartitionResult:
    index: int
    versions: list[VersionRows]
    commits: int
    last_commit: int
    open_txns: list[OpenTxn]
    dictionary: str  #: JSON; every partition must end with the same one
    decoder: DecoderState
    records: int
    stats: dict[str, int] = field(default_factory=dict)


def run_partition(index: int, records: Iterable[tuple[int, XLogRecord]],
                  ctx: PartitionContext) -> Iterator[PartitionResult]:
    """mapPartitionsWithIndex body: ``records`` are (shuffle key, record) sorted by LSN."""
    if ctx.spill_dir:
        Path(ctx.spill_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"cdclake-{ctx.batch}-p{index}-",
                                     dir=ctx.spill_dir) as tmp:
        yield _decode(index, records, ctx, Path(tmp))


def _decode(index: int, records: Iterable[tuple[int, XLogRecord]],
            ctx: PartitionContext, spill_dir: Path) -> PartitionResult:
    dictionary = Dictionary.from_json(ctx.dictionary)
    clean_spill_dir(spill_dir)
    buffer = ReorderBuffer(ctx.work_mem, spill_dir, ctx.segment_size)
    collector = RowCollector(dictionary.types, ctx.rows_per_part)
    flt = Filter(dictionary, tables=ctx.tables)
    replay = OwnedReplay(Replayer(dictionary, collector, None, flt), index, ctx.partitions)
    decoder = Decoder(db_oid=ctx.db_oid, buffer=buffer, replay=replay,
                      filter=flt, start_lsn=ctx.start_lsn,
                      version=ctx.version, tracker=PgClassTracker(dictionary),
                      skip_before=ctx.skip_before)
    if ctx.decoder is not None:
        ctx.decoder.apply(decoder)
    restore_open(buffer, ctx.open_txns, replay.owns, ctx.store, spill_dir)
    n = 0
    for _key, rec in records:
        decoder.process(rec)
        n += 1
    open_txns = save_open(buffer, replay.owns, ctx.store, ctx.layout, ctx.batch)
    st = decoder.stats
    result = PartitionResult(
        index=index, versions=collector.versions(), commits=collector.commits,
        last_commit=replay.last_commit, open_txns=open_txns,
        dictionary=json.dumps(dictionary.to_json(), sort_keys=True),
        decoder=DecoderState.of(decoder), records=n,
        stats={"changes": st.changes, "aborted": st.aborted,
               "cut_before_start": st.cut_before_start,
               "spilled_txns": buffer.spilled_txns, "spilled_changes": buffer.spilled_changes,
               "peak_memory": max(buffer.peak_size, buffer.size)})
    buffer.discard_all()
    return result
