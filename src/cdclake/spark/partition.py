"""Stages 2-6 in one Spark partition: decode, buffer, reassemble and write owned rows.

Every partition builds its decoding context as a local decode does
(:func:`cdclake.decoding.context.create_decoding_context`) and feeds it every record of the
batch in LSN order; its decoder parses the changes of the transactions it owns and follows
every catalog event, so each keeps the same dictionary (:mod:`cdclake.spark.routing`). Only
transactions it owns are emitted; the Arrow plugin's row builder hands
their rows, per relation version, to :class:`~cdclake.spark.writer.RunParts`, which writes
them to the store as this partition's sorted runs; the task result carries only their keys
and counts. What the partition adds is moving bytes: the previous batch's open transactions
from the store, this batch's to it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdclake import native
from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectStore
from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.carry import OpenTxn
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.collector import fewer_collections
from cdclake.decoding.context import DecodeOptions, create_decoding_context
from cdclake.decoding.plugins.arrow import ArrowRows
from cdclake.decoding.startup import Startup
from cdclake.spark.routing import keeps, owns, share
from cdclake.spark.writer import RunParts, VersionRun
from cdclake.wal.record import XLogRecord


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
    exclude: frozenset[str]  #: CDCLAKE_EXCLUDE_TABLES: never decoded (gate 3)
    runs_prefix: str  #: where partition i writes its runs: ``<runs_prefix>p<i>/``
    generation: int  #: the decode lease generation (its spill keys name it)
    dictionary: dict[str, Any]
    startup: Startup | None  #: the previous batch's decoder start-up; None for a new stream
    open_txns: list[OpenTxn]
    store: ObjectStore
    layout: Layout
    spill_dir: str | None  #: local parent for spill files; None = the system temp dir
    skip_before: int = 0  #: see :class:`~cdclake.decoding.context.DecodeOptions`
    ddl_key: bytes | None = None  #: see :class:`~cdclake.decoding.context.DecodeOptions`
    #: the split transactions and the LSN each is split from (:data:`cdclake.spark.routing.Split`)
    split: dict[int, int] = field(default_factory=dict)
    #: the batch's subtransaction memberships (:class:`cdclake.spark.routing.RouteMap`)
    top_of: dict[int, int] = field(default_factory=dict)


@dataclass
class PartitionResult:
    index: int
    runs: list[VersionRun]
    commits: int  #: of the transactions this partition emits whole
    split_commits: list[int]  #: the split transactions it emitted a part of (top-level xids)
    last_commit: int
    open_txns: list[OpenTxn]
    dictionary: str  #: JSON; every partition must end with the same one
    startup: Startup
    records: int
    stats: dict[str, int] = field(default_factory=dict)


def run_partition(index: int, records: Iterable[XLogRecord],
                  ctx: PartitionContext) -> Iterator[PartitionResult]:
    """Partition ``index``'s task body: ``records`` are the batch's records in LSN order."""
    if ctx.spill_dir:
        Path(ctx.spill_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"cdclake-{ctx.batch}-p{index}-",
                                     dir=ctx.spill_dir) as tmp:
        yield _decode(index, records, ctx, Path(tmp))


def _decode(index: int, records: Iterable[XLogRecord],
            ctx: PartitionContext, spill_dir: Path) -> PartitionResult:
    dictionary = Dictionary.from_json(ctx.dictionary)
    runs = RunParts(ctx.store, f"{ctx.runs_prefix}p{index}/")
    rows = _PartRows(dictionary.types, runs, ctx.split)
    options = DecodeOptions(db_oid=ctx.db_oid, start_lsn=ctx.start_lsn, work_mem=ctx.work_mem,
                            spill_dir=spill_dir, tables=ctx.tables, exclude=ctx.exclude,
                            skip_before=ctx.skip_before, ddl_key=ctx.ddl_key)
    decoding = create_decoding_context(
        options, dictionary, rows, version=ctx.version, segment_size=ctx.segment_size,
        startup=ctx.startup, carried=ctx.open_txns, get=ctx.store.get_file,
        owns=owns(index, ctx.partitions, ctx.split, ctx.top_of),
        share=share(index, ctx.partitions, ctx.split, ctx.top_of),
        keeps=keeps(index, ctx.partitions, ctx.split), messages=index == 0)
    process = decoding.process
    n = 0
    with fewer_collections():
        for rec in records:
            process(rec)
            n += 1

    def put(xid: int, first_lsn: int, part: int | None, path: Path) -> str:
        key = ctx.layout.spill_key(ctx.batch, xid, first_lsn, generation=ctx.generation,
                                   part=part)
        ctx.store.put_file(key, path)
        return key

    def part_of(top: int) -> tuple[int, int, int] | None:
        since = ctx.split.get(top)
        return None if since is None else (index, ctx.partitions, since)

    open_txns = decoding.save_open(put, part_of)
    rows.finish()
    st = decoding.decoder.stats
    buffer = decoding.buffer
    result = PartitionResult(
        index=index, runs=runs.runs(), commits=rows.commits - len(rows.split_commits),
        split_commits=rows.split_commits, last_commit=rows.last_lsn, open_txns=open_txns,
        dictionary=json.dumps(dictionary.to_json(), sort_keys=True),
        startup=decoding.startup, records=n,
        stats={"changes": st.changes, "aborted": st.aborted,
               "cut_before_start": st.cut_before_start,
               "spilled_txns": buffer.spilled_txns, "spilled_changes": buffer.spilled_changes,
               "peak_memory": decoding.peak_memory,
               # every partition applies every DDL message: one of them counts
               "forged_ddl": len(decoding.replayer.forged) if index == 0 else 0,
               # an executor that could not load the compiled hot path (cdclake.native)
               "pure_python_partitions": 0 if native.active() else 1})
    decoding.close()
    return result


class _PartRows(ArrowRows):
    """The Arrow plugin of a partition, which tells apart the commits of split transactions:
    every partition that holds a part of one emits it, and the job counts it once."""

    def __init__(self, types: Any, sink: RunParts, split: Mapping[int, int]) -> None:
        super().__init__(types, sink)
        self.split = split
        self.split_commits: list[int] = []

    def commit(self, txn: TxnInfo) -> None:
        super().commit(txn)
        if txn.xid in self.split:
            self.split_commits.append(txn.xid)
