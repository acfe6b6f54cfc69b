"""The initial snapshot on Spark: copy tables' current rows into their mirrors, in parallel,
from one exported snapshot, and hand over to the change stream exactly.

The driver holds the snapshot transaction (:func:`cdclake.catalog.export.export_snapshot`),
plans each table as chunks of heap blocks (``ctid`` ranges: tables without a key split as
well as any), stages each mirror's schema (:func:`cdclake.snapshot.mirror.open_mirror`) and runs
one Spark task per chunk (:func:`cdclake.snapshot.chunks.copy_chunk`): the executor joins
the snapshot, streams the chunk through COPY into one Parquet data file in the mirror's
location and returns its path and counts — rows never pass through the driver. Then each
table is committed in one Iceberg transaction that replaces the mirror's files and records the
handoff facts (:mod:`cdclake.lake.visibility`). Progress (rows, rows/s, chunks per table) is
logged while the tasks run; a chunk retries inside its task; a run that dies before a table's
commit leaves that table without a committed snapshot, so the next run copies it again and,
once committed, removes the orphaned files (those of runs that can no longer commit:
:meth:`cdclake.snapshot.mirror.MirrorSnapshot.remove_stale`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.archive import Layout, open_store
from cdclake.archive.arrowfs import arrow_filesystem
from cdclake.archive.source import StoreSegmentSource
from cdclake.catalog.export import (
    FollowedTable,
    HeldSnapshot,
    SourceTable,
    describe,
    export_snapshot,
    followed_tables,
)
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import column_fields
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import ConfigError, LakeError, SourceError, WalError
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import find_mirror
from cdclake.lake.visibility import SnapshotFacts
from cdclake.lsn import format_lsn
from cdclake.snapshot.chunks import (
    ChunkResult,
    ChunkTask,
    ChunkTotals,
    counted_copy,
    server_name,
    types_to_json,
)
from cdclake.snapshot.mirror import MirrorSnapshot, open_mirror
from cdclake.sparkenv.session import session
from cdclake.sparkenv.tasks import spark_errors, task
from cdclake.stream.progress import load_progress

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: seconds between progress lines while chunks are copied
PROGRESS_EVERY = 5.0
#: a table is cut into more chunks than ``snapshot_chunk_size`` asks, to keep every core
#: copying, only while each chunk keeps this much heap (a data file, a connection, a task each)
SPREAD_MIN_BYTES = 8 << 20


@dataclass
class TableSnapshot:
    """One table's part of a snapshot run (JSON-able via :meth:`to_json`)."""

    table: str
    mirror: str
    chunks: int
    blocks: int
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0  #: summed over the table's chunks (they run in parallel)
    retries: int = 0
    snapshot_id: int | None = None  #: the mirror's Iceberg snapshot after the commit
    stale_removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "mirror": self.mirror, "chunks": self.chunks,
                "blocks": self.blocks, "rows": self.rows, "bytes": self.bytes,
                "copy_seconds": round(self.seconds, 3), "retries": self.retries,
                "snapshot_id": self.snapshot_id, "stale_removed": self.stale_removed}


def tables_to_copy(config: Config, catalog: Catalog, *, replace: Sequence[str] = (),
                   replace_all: bool = False, missing: bool = True) -> list[FollowedTable]:
    """The tables in scope a snapshot copies now: those ``replace`` names (``schema.table``;
    every table with ``replace_all``) and, with ``missing``, those without a mirror yet. A
    name out of scope, or no table of the source, is refused."""
    if not config.source_dsn:
        raise ConfigError("an initial snapshot reads the source: set CDCLAKE_SOURCE_DSN")
    _check_scope(replace, config)
    listed = [t for t in followed_tables(config.source_dsn)
              if (not config.tables or t.name in config.tables)
              and t.name not in config.exclude_tables]
    _check_named(replace, listed)
    return [t for t in listed if replace_all or t.name in replace
            or (missing and not _has_mirror(catalog, config, t))]


def snapshot_tables(config: Config, *, replace: Sequence[str] = (), replace_all: bool = False,
                    missing: bool = True, spark: SparkSession | None = None,
                    catalog: Catalog | None = None,
                    progress: Callable[[str], None] | None = None,
                    todo: list[FollowedTable] | None = None) -> dict[str, Any]:
    """Copy, in one snapshot, the tables :func:`tables_to_copy` chooses (``todo``, when the
    caller chose them first). A replaced mirror is swapped in one commit (``cdclake
    snapshot``). When there is nothing to copy no snapshot is taken at all: a scheduled run
    costs the source one catalog query."""
    say = progress or log.info
    catalog = catalog or open_catalog(config)
    if todo is None:
        todo = tables_to_copy(config, catalog, replace=replace, replace_all=replace_all,
                              missing=missing)
    started = time.monotonic()
    if not todo:
        return {"tables": [], "snapshot": None, "rows": 0, "seconds": 0.0,
                "rows_per_second": None}
    with export_snapshot(config.source_dsn, [t.oid for t in todo],
                         wait_seconds=config.snapshot_wait) as held:
        snap = held.snapshot
        candidates = held.tables([t.name for t in todo])
        _check_archive(config, snap.lsn, [t.name for t in candidates])
        run = uuid.uuid4().hex[:16]
        facts = SnapshotFacts(snap.id, snap.lsn, snap.end_lsn, snap.xmin, snap.xmax, snap.xip,
                              snap.taken_at_us, run)
        say(f"initial {describe(snap)}: {len(candidates)} table(s)")
        mirrors, tasks, reports = _plan(catalog, config, held, candidates, run)
        try:
            results = _copy(spark or _session(config), tasks, reports, say)
        finally:  # a copy that failed for it, or one that ended after it: nothing commits
            _check_held(held, config, candidates)
        for t in candidates:
            rep, m = reports[t.name], mirrors[t.name]
            mine = sorted((r for r in results if r.table == t.name), key=lambda r: r.index)
            rep.snapshot_id = m.commit([r.path for r in mine],
                                       [c for r in mine for c in r.counts_only], facts,
                                       config.stream)
            # the commit moved the mirror on: runs staged before it can never commit
            rep.stale_removed = m.remove_stale(*arrow_filesystem(
                config, f"{m.table.location().rstrip('/')}/data"))
            say(f"snapshot of {t.name}: {rep.rows} row(s) in {rep.chunks} chunk(s) committed "
                f"to {rep.mirror}")
    seconds = time.monotonic() - started
    rows = sum(r.rows for r in reports.values())
    return {"snapshot": {**facts.to_json(), "lsn": format_lsn(snap.lsn),
                         "end_lsn": format_lsn(snap.end_lsn)},
            "tables": [reports[t.name].to_json() for t in candidates],
            "rows": rows, "seconds": round(seconds, 3),
            "rows_per_second": round(rows / seconds) if seconds else None}


def _has_mirror(catalog: Catalog, config: Config, t: FollowedTable) -> bool:
    """A mirror with rows committed; one a run created but died before filling (no Iceberg
    snapshot yet) still needs its initial snapshot."""
    ident = find_mirror(catalog, config, t.schema, t.table, t.oid)
    return ident is not None and catalog.load_table(ident).current_snapshot() is not None


def _check_scope(tables: Sequence[str], config: Config) -> None:
    """Named tables the stream does not follow (CDCLAKE_TABLES, CDCLAKE_EXCLUDE_TABLES) have
    no mirror to fill."""
    outside = [t for t in tables if config.tables and t not in config.tables]
    if outside:
        raise ConfigError(f"cannot snapshot {', '.join(outside)}: not in CDCLAKE_TABLES "
                          f"({', '.join(config.tables)}), so the stream does not follow "
                          f"{'it' if len(outside) == 1 else 'them'}")
    excluded = [t for t in tables if t in config.exclude_tables]
    if excluded:
        raise ConfigError(f"cannot snapshot {', '.join(excluded)}: in CDCLAKE_EXCLUDE_TABLES, "
                          f"so the stream does not follow {'it' if len(excluded) == 1 else 'them'}")


def _check_named(tables: Sequence[str], listed: list[FollowedTable]) -> None:
    names = {t.name for t in listed}
    unknown = [t for t in tables if t not in names]
    if unknown:
        raise ConfigError(f"cannot snapshot {', '.join(unknown)}: not a followed table "
                          "with rows of its own (a table, partition or materialized view) in "
                          "the source")


def _check_archive(config: Config, lsn: int, tables: list[str]) -> None:
    """The stream must reach back to before the snapshot, or the handoff has a hole."""
    store = open_store(config)
    progress = load_progress(store, Layout())
    if progress is not None:
        start, what = progress.start_lsn, "the stream starts"
    else:
        source = StoreSegmentSource(store, Layout())
        try:
            names = source.list_segments()
            size = source.segment_size()
        except WalError:
            return  # nothing archived yet: the first batch must find the install's message
        if not names:
            return
        start, what = min(n.segno for n in names) * size, "the WAL archive begins"
    if start > lsn:
        raise LakeError(f"cannot snapshot {', '.join(tables)}: the snapshot is at LSN "
                        f"{format_lsn(lsn)} but {what} at {format_lsn(start)}: changes "
                        "between them would be lost; archive WAL from before the snapshot")


def _plan(catalog: Catalog, config: Config, held: HeldSnapshot, tables: list[SourceTable],
          run: str) -> tuple[dict[str, MirrorSnapshot], list[ChunkTask],
                             dict[str, TableSnapshot]]:
    types = held.dictionary.types.at(held.snapshot.lsn)
    layouts = LayoutCache(held.dictionary.types)
    io_props = config.iceberg_properties()
    block_size = held.snapshot.block_size
    per_chunk = max(1, config.snapshot_chunk_size // block_size)
    mirrors: dict[str, MirrorSnapshot] = {}
    reports: dict[str, TableSnapshot] = {}
    tasks: list[ChunkTask] = []
    for t in tables:
        rel = t.relation
        m = mirrors[t.name] = open_mirror(catalog, config, rel,
                                          column_fields(layouts.get(rel), types), run)
        # at least one chunk (the last is open-ended); none for a matview WITH NO DATA
        blocks = chunk_blocks(t.blocks, per_chunk, config.spark_partitions,
                              max(1, SPREAD_MIN_BYTES // block_size))
        starts = (list(range(0, t.blocks, blocks)) or [0]) if t.populated else []
        reports[t.name] = TableSnapshot(t.name, ".".join(m.table.name()), len(starts), t.blocks)
        for i, first in enumerate(starts):
            last = i == len(starts) - 1
            tasks.append(ChunkTask(
                table=t.name, oid=rel.oid, index=i, first_block=first,
                end_block=None if last else first + blocks, dsn=config.source_dsn,
                snapshot_id=held.snapshot.id, relation=rel.to_json(),
                types=types_to_json(rel, types),
                schema_json=m.schema.model_dump_json(), commit_lsn=held.snapshot.lsn,
                commit_ts_us=held.snapshot.taken_at_us, location=m.file_location(i),
                io_properties=io_props))
    # the largest chunks first, so the last wave is short
    tasks.sort(key=lambda c: -(c.end_block - c.first_block if c.end_block is not None
                               else reports[c.table].blocks - c.first_block))
    return mirrors, tasks, reports


def chunk_blocks(blocks: int, per_chunk: int, cores: int, min_blocks: int) -> int:
    """Heap blocks per copy task for a table of ``blocks``: at most ``per_chunk``
    (``snapshot_chunk_size``), the chunks of equal size, and as many as fill whole waves of
    ``cores`` tasks when each still gets ``min_blocks``. A 26 MB table was one 64 MB chunk,
    copied on one core while the other idled; a 73 MB one a chunk of 64 MB and one of 9 MB."""
    n, cores = max(1, -(-blocks // per_chunk)), max(1, cores)
    waves = -(-n // cores) * cores
    if waves > n and blocks // waves >= min_blocks:
        n = waves
    return max(1, -(-blocks // n))


def _copy(spark: SparkSession, tasks: list[ChunkTask], reports: dict[str, TableSnapshot],
          say: Callable[[str], None]) -> list[ChunkResult]:
    """Run every chunk on Spark, reporting progress; the results (paths, counts) only."""
    if not tasks:
        return []
    sc = spark.sparkContext
    totals = sc.accumulator({}, ChunkTotals())
    rdd = sc.parallelize(tasks, len(tasks)).map(task(counted_copy(totals)))
    started = time.monotonic()
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(rdd.collect)
        future.add_done_callback(lambda _: stop.set())  # no wait past the last task
        while not stop.wait(PROGRESS_EVERY):
            say(_progress_line(totals.value, reports, time.monotonic() - started))
        with spark_errors("initial snapshot: copying on Spark", LakeError):
            results: list[ChunkResult] = future.result()
    for r in results:
        rep = reports[r.table]
        rep.rows += r.rows
        rep.bytes += r.bytes
        rep.seconds += r.seconds
        rep.retries += r.attempts - 1
    say(_progress_line({t: (r.rows, r.chunks) for t, r in reports.items()}, reports,
                       time.monotonic() - started))
    return results


def _progress_line(done: dict[str, tuple[int, int]], reports: dict[str, TableSnapshot],
                   seconds: float) -> str:
    rows = sum(r for r, _ in done.values())
    chunks = sum(c for _, c in done.values())
    total = sum(r.chunks for r in reports.values())
    rate = f"{rows / seconds:,.0f}" if seconds > 0 else "-"
    per_table = ", ".join(f"{t} {done.get(t, (0, 0))[0]:,} rows {done.get(t, (0, 0))[1]}/"
                          f"{r.chunks}" for t, r in sorted(reports.items()))
    return (f"snapshot: {rows:,} rows, {rate} rows/s, {chunks}/{total} chunks ({per_table})")


def _check_held(held: HeldSnapshot, config: Config, tables: list[SourceTable]) -> None:
    """The snapshot's transaction must have lasted the whole copy: its locks kept the tables
    from being rewritten under the copy by block range, and copies that joined it later saw
    the same rows. If the source ended it (the server stopped, its session terminated),
    nothing is committed, whatever the copies did."""
    import psycopg

    try:
        held.conn.execute("SELECT 1")
    except psycopg.Error as exc:
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise SourceError(f"initial snapshot of {', '.join(t.name for t in tables)}: the "
                          f"source {server_name(config.source_dsn)} ended the snapshot's "
                          f"session during the copy ({cause}); nothing was committed: run "
                          "again") from exc


def _session(config: Config) -> SparkSession:
    with spark_errors("initial snapshot: Spark does not start", LakeError):
        return session(config, "snapshot", mirrors=False, tasks=(counted_copy.__module__,))
