"""The Spark decode job: one batch of archived segments -> ``changes/<batch>/``.

Stages (docs/architecture.md, the data flow): tasks scan segments in parallel (each also reads
the head of the next segment for a straddling record) and the driver collects what they found,
among it the subtransaction memberships and the large transactions; then each of
``spark_partitions`` partitions reads the batch's segments itself and feeds every record to
its decoder, which decodes the transactions it owns (by top-level xid, a split one by stripes
of WAL) and follows every catalog event (:mod:`cdclake.spark.routing`; no record crosses a
process): the reorder buffer and reassembly of :mod:`cdclake.decoding`,
writing the rows it emits to the store as sorted runs; one task per
relation version merges the runs by commit LSN into the stream's parts
(:mod:`cdclake.spark.writer`). The driver sees keys, counts and LSNs, never rows, and writes
the manifest. A batch is at most ``max_batch_segments`` segments (``max_batch_bytes`` of
WAL). What a batch adds to the transactions open at its end goes to ``spill/<batch>/``; they
come back in the next batch, and stay as long as one of them is open; the progress
(:mod:`cdclake.stream.progress`) says where that batch starts.

Fencing: every object a decode writes is under its decode lease generation
(``changes/<batch>/g<G>/``, ``spill/<batch>/g<G>/``, ``dictionary/<batch>/g<G>.json``), and
until its progress is committed it deletes nothing else. The progress names the generation;
only then is the generation's manifest copied to ``changes/<batch>/_manifest.json``, where
the lake finds batches, and the other generations' objects of the batch removed
(:func:`publish`). A run that lost its lease and goes on can only write and remove objects
no committed progress names.

A new stream given no start LSN starts at the first full dictionary ``cdclake source install``
wrote into the WAL of its database: the tasks report where they saw one, the first batch
emits the transactions committing from there on and drops every change recorded before it
(its tables were described by nothing); a first batch without one is refused. Where the source
recorded the install's message, the first batch begins at its segment and waits until it is
archived (:mod:`cdclake.spark.plan`).

Every segment a task reads is checked against its manifest entry's sha256
(:class:`~cdclake.archive.source.StoreSegmentSource`); the scan hands a mismatch to the driver,
which stops the batch with it before anything is decoded.

Usage: ``python -m cdclake.spark.job [--until SEGMENT]`` decodes one batch with the
configuration from the environment (``CDCLAKE_*``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.archive.lease import DECODE, UNFENCED, Fence, Lease, Unfenced
from cdclake.archive.store import ObjectStore
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion
from cdclake.catalog.signing import load_key
from cdclake.config import Config
from cdclake.decoding.carry import OpenTxn, open_memberships
from cdclake.decoding.plugins.arrow import build_manifest, manifest_bytes
from cdclake.decoding.startup import Startup
from cdclake.errors import (
    ConcurrentRunError,
    ConfigError,
    DecodingError,
    ObjectNotFound,
    SegmentDigestError,
    StoreError,
    WalCorruptError,
)
from cdclake.lsn import format_lsn, parse_segment_name
from cdclake.spark.partition import PartitionContext, PartitionResult, run_partition
from cdclake.spark.plan import BatchPlan, Waiting, next_plan
from cdclake.spark.routing import RouteMap
from cdclake.spark.segments import ParsedSegment, scan_segments, task_records
from cdclake.spark.writer import MergedVersion, merge_runs
from cdclake.sparkenv.session import session
from cdclake.sparkenv.tasks import spark_errors, task
from cdclake.stream.progress import Progress, committed, load_progress, save_progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    batch: str  #: batch id, the directory name under changes/
    manifest: dict[str, Any]  #: the stream manifest (decoding/stream.py contract)
    start_lsn: int
    end_lsn: int
    commits: int
    segments: list[str]
    #: summed over partitions: changes, aborted, spilled_txns, spilled_changes, peak_memory,
    #: pure_python_partitions; and peak_partition_changes, the changes of the partition that
    #: decoded the most (a transaction's changes are all its partition's, so one large
    #: transaction is decoded on one core: the batch waits for that partition)
    stats: dict[str, int] = field(default_factory=dict)


def decode_batch(config: Config, *, spark: SparkSession | None = None,
                 until_segment: str | None = None, dry_run: bool = False,
                 start_lsn: int | None = None, db_oid: int | None = None,
                 dictionary: Dictionary | None = None,
                 fence: Fence = UNFENCED) -> BatchResult | Waiting | None:
    """Decode the archived segments not yet consumed (per state/progress.json), up to and
    including until_segment if given; None when there is nothing new, :class:`Waiting` when a
    new stream waits for the install's segment. Idempotent: re-running after a crash before
    progress is saved rewrites the same batch.

    The keyword-only ``start_lsn`` (emit transactions committing at or after it), ``db_oid``
    (else looked up over ``config.source_dsn``) and ``dictionary`` only matter for the first
    batch; later batches take them from the saved state. Given neither a start LSN nor a
    dictionary, the stream starts at the first full dictionary ``cdclake source install``
    wrote in the first batch's WAL (the message record's LSN, saved as the stream's
    ``start_lsn``): transactions committing before it are not emitted, changes recorded before
    it are dropped (from transactions open across the install too), and a first batch that
    holds no such message raises :class:`~cdclake.errors.DecodingError` with nothing saved.
    The segments wholly before the message that the source recorded are skipped
    (:func:`cdclake.spark.plan.next_plan`).

    ``fence`` is the decode lease (:class:`cdclake.archive.lease.Lease`; ``UNFENCED``:
    generation 0, no check): the batch's objects are written under its generation, its check
    is made before the parts are merged and before the progress is committed, and what this
    attempt wrote is removed again when it did not commit.
    """
    store = open_store(config)
    layout = Layout()
    progress = load_progress(store, layout)
    if progress is not None:  # the run that committed it may have died before publishing it
        publish(store, layout, progress)
    plan = next_plan(config, store, layout, progress, until_segment,
                     from_install=start_lsn is None and dictionary is None)
    if not isinstance(plan, BatchPlan):
        return plan
    if dry_run:  # what would be decoded: no manifest, nothing written
        return BatchResult(plan.name, {}, plan.read_from, plan.read_from, 0, plan.segments)
    if progress is not None:
        state = _Inherited.of_progress(store, progress)
    else:
        state = _Inherited.first(config, start_lsn, db_oid, dictionary)
    key = load_key(config, config.source_dsn)
    if key is None:
        raise ConfigError("no key to authenticate the source's schema messages: set "
                          "CDCLAKE_DDL_KEY_FILE to the file `cdclake source install` wrote, "
                          "or CDCLAKE_SOURCE_DSN to a superuser, who may read it")
    if spark is None:
        with spark_errors("decode: Spark does not start", DecodingError):
            spark = session(config, "decode", mirrors=False, tasks=(__name__,))
    own = _Objects(layout, plan.name, fence.generation)
    own.clear(store)  # left by an attempt of this generation that died (an unfenced run)
    try:
        # a task's cdclake error (CRC, unknown relation, type) comes back as itself
        with spark_errors(f"decode of batch {plan.name} on Spark", DecodingError):
            timings = _Timings()
            results, ends, version, state = _run(spark, config, store, layout, plan,
                                                 progress, state, key, own, timings)
            return _finish(spark, store, layout, plan, progress, state, results, ends,
                           version, fence, own, timings)
    except BaseException as exc:
        _abandon(store, layout, plan, own)
        # a run that lost its lease failed for that (a newer run removed its runs): say so
        if isinstance(exc, Exception) and not isinstance(exc, ConcurrentRunError):
            lost = _lost_lease(fence)
            if lost is not None:
                raise lost from exc
        raise


def _lost_lease(fence: Fence) -> ConcurrentRunError | None:
    """The error of a run that lost its lease; None while it holds it, or cannot tell."""
    try:
        fence.check()
    except ConcurrentRunError as exc:
        return exc
    except Exception:  # the store failing too: the first error says it
        return None
    return None


def _abandon(store: ObjectStore, layout: Layout, plan: BatchPlan, own: _Objects) -> None:
    """Remove what a failed attempt wrote — unless its progress was committed (the failure
    came after), then they are the batch. The store may be what failed: then they stay, for
    the run that commits the batch to remove."""
    try:
        mine = committed(store, layout, plan.seq)
        if mine is None or (mine.batch, mine.generation) != (plan.name, own.generation):
            own.clear(store)
    except Exception as exc:
        log.warning("decode: batch %s: this attempt's objects under %s stay (%s)", plan.name,
                    store.url(own.changes), exc)


@dataclass(frozen=True)
class _Objects:
    """What a decode of ``batch`` by lease generation ``generation`` writes: the only keys it
    writes or deletes until its progress is committed."""

    layout: Layout
    batch: str
    generation: int

    @property
    def changes(self) -> str:
        """Its parts (and staged manifest) go here, paths relative to the batch directory
        starting with the generation's token."""
        return self.layout.changes_prefix(self.batch, self.generation)

    @property
    def runs(self) -> str:
        """The partitions' sorted runs (:mod:`cdclake.spark.writer`), removed once merged."""
        return f"{self.changes}_runs/"

    @property
    def spill(self) -> str:
        return self.layout.spill_prefix(self.batch, self.generation)

    @property
    def dictionary(self) -> str:
        return self.layout.dictionary_key(self.batch, self.generation)

    def clear(self, store: ObjectStore) -> None:
        _clear(store, self.changes)
        _clear(store, self.spill)
        store.delete(self.dictionary)


@dataclass
class _Inherited:
    """What a batch starts from: the previous batch's state, or the first batch's inputs."""

    db_oid: int
    start_lsn: int
    dictionary: dict[str, Any]
    startup: Startup | None
    open_txns: list[OpenTxn]
    confirmed_lsn: int
    version: int
    #: a new stream without a start LSN: the first batch starts at the first full dictionary
    #: of its WAL (``start_lsn`` is 0 until :func:`_dictionary_start` finds it)
    from_dictionary: bool = False

    @classmethod
    def of_progress(cls, store: ObjectStore, p: Progress) -> _Inherited:
        try:
            dictionary = json.loads(store.get(p.dictionary_key))
        except Exception as exc:
            raise StoreError(f"cannot read the dictionary {store.url(p.dictionary_key)} that "
                             f"batch {p.batch} left: {exc}") from exc
        return cls(p.db_oid, p.start_lsn, dictionary, p.startup, p.open_txns, p.confirmed_lsn,
                   p.version)

    @classmethod
    def first(cls, config: Config, start_lsn: int | None, db_oid: int | None,
              dictionary: Dictionary | None) -> _Inherited:
        if db_oid is None:
            if not config.source_dsn:
                raise ConfigError("the first batch needs the source database's OID: set "
                                  "CDCLAKE_SOURCE_DSN (or pass db_oid)")
            from cdclake.catalog.capture import database_oid

            db_oid = database_oid(config.source_dsn)
        if start_lsn is None and dictionary is None:
            return cls(db_oid, 0, Dictionary().to_json(), None, [], 0, 0, from_dictionary=True)
        d = dictionary if dictionary is not None else Dictionary()
        return cls(db_oid, start_lsn or 0, d.to_json(), None, [], 0, 0)


class _Timings(dict[str, int]):
    """Milliseconds of the job's stages, in the batch's stats (``ms_scan``,
    ``ms_partitions``, ``ms_merge_runs``): the decode step's own profile."""

    def __init__(self) -> None:
        super().__init__()
        self.mark = time.monotonic()

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self[f"ms_{stage}"] = round((now - self.mark) * 1000)
        self.mark = now


def _run(spark: SparkSession, config: Config, store: ObjectStore, layout: Layout,
         plan: BatchPlan, progress: Progress | None, state: _Inherited, key: bytes,
         own: _Objects, timings: _Timings
         ) -> tuple[list[PartitionResult], _Ends, int, _Inherited]:
    """The Spark part: scan, collect routing facts, then each partition reads the batch and
    decodes its records; where the batch's WAL ended, and the state with the first batch's
    start LSN resolved."""
    sc = spark.sparkContext
    size, db = plan.segment_size, state.db_oid
    # a Spark task scans consecutive segments, one after the other: per-task costs are paid
    # once per core, not once per segment
    tasks = sc.parallelize(list(plan.tasks), min(len(plan.tasks), config.spark_partitions))
    summaries = tasks.mapPartitions(task(
        lambda ts: scan_segments(ts, store, layout, size, db, key))).collect()
    timings.lap("scan")
    damaged = next((s.damaged for s in summaries if s.damaged), None)
    if damaged is not None:
        raise SegmentDigestError(damaged)
    _check_joins(plan, summaries, progress)
    versions = {s.version for s in summaries if s.version} | (
        {state.version} if state.version else set())
    if len(versions) > 1:
        raise WalCorruptError(f"batch {plan.name} mixes WAL of PostgreSQL versions "
                              f"{sorted(versions)}")
    version = versions.pop() if versions else 0
    if state.from_dictionary:
        state = _dictionary_start(plan, summaries, state)
    ends = _Ends(summaries[-1].end_of_wal or plan.read_from, next(
        (x.last_lsn for x in reversed(summaries) if x.last_lsn is not None),
        progress.last_lsn if progress is not None else None))
    n = config.spark_partitions
    routes = RouteMap.merge(n, (p.facts for p in summaries), open_memberships(state.open_txns),
                            state.open_txns, plan.read_from)
    ctx = PartitionContext(
        partitions=n, batch=plan.name, db_oid=db, start_lsn=state.start_lsn,
        version=version, segment_size=size, work_mem=config.work_mem,
        tables=frozenset(config.tables), exclude=frozenset(config.exclude_tables),
        runs_prefix=own.runs, generation=own.generation,
        dictionary=state.dictionary, startup=state.startup, open_txns=state.open_txns,
        store=store, layout=layout,
        spill_dir=str(config.spill_dir) if config.spill_dir else None,
        skip_before=state.start_lsn if state.from_dictionary else 0, ddl_key=key,
        split=dict(routes.split), top_of=routes.top_of)
    tasks_ = list(plan.tasks)

    def decode_partition(index: int, _: Iterator[int]) -> Iterator[PartitionResult]:
        return run_partition(index, task_records(tasks_, store, layout, size, db), ctx)

    results = (sc.parallelize(range(n), n).mapPartitionsWithIndex(task(decode_partition))
               .collect())
    timings.lap("partitions")
    for r in results:
        r.open_txns = routes.carried(r.open_txns)
    return sorted(results, key=lambda r: r.index), ends, version, state


@dataclass(frozen=True)
class _Ends:
    """Where a batch's WAL ended."""

    next_lsn: int  #: where the next record starts
    last_lsn: int | None  #: the last record read (None: no record read yet, ever)


def _dictionary_start(plan: BatchPlan, summaries: list[ParsedSegment],
                      state: _Inherited) -> _Inherited:
    """The first batch's state starting at the first full dictionary its tasks saw.

    Before that message the WAL has no description of the database's tables, so a new stream
    cannot decode anything there; refused (nothing saved yet) when the batch holds none.
    """
    found = [s.dictionary_lsn for s in summaries if s.dictionary_lsn is not None]
    if not found:
        segments = plan.segments
        where = segments[0] if len(segments) == 1 else f"{segments[0]}..{segments[-1]}"
        raise DecodingError(
            f"batch {plan.name}: segments {where} hold no full dictionary of database "
            f"{state.db_oid} (the message `cdclake source install` writes), so a new stream "
            "has nowhere to start; run `cdclake source install` on the source and decode WAL "
            "that includes it, or give --start-lsn")
    return dataclasses.replace(state, start_lsn=min(found))


def _check_joins(plan: BatchPlan, summaries: list[ParsedSegment],
                 progress: Progress | None) -> None:
    """Consecutive tasks must join: no WAL ends early but the last, and prev-links continue,
    from the last record the previous batch read (its progress says which) on. A broken link
    names the timelines on both sides: where they differ, one timeline's WAL does not continue
    the other's as the archived history files say it does."""
    size = plan.segment_size
    last: tuple[int, int, str] | None = None  # the record to link back to: LSN, timeline, what
    if progress is not None and progress.last_lsn is not None:
        last = (progress.last_lsn, parse_segment_name(progress.last_segment, size).timeline,
                f"the last record batch {progress.batch} read")
    for i, (planned, s) in enumerate(zip(plan.tasks, summaries, strict=True)):
        name, tli = planned.segment.name(size), planned.segment.timeline
        if last is not None and s.first_lsn is not None and s.first_prev != last[0]:
            lsn, was, what = last
            why = (f": timeline {tli}'s WAL does not continue timeline {was}'s here"
                   if was != tli else "")
            raise WalCorruptError(f"record at {format_lsn(s.first_lsn)} (timeline {tli}) links "
                                  f"back to {format_lsn(s.first_prev)}, not to {what}, "
                                  f"{format_lsn(lsn)} (timeline {was}){why}", segment=name,
                                  lsn=s.first_lsn)
        if i < len(summaries) - 1 and s.end_of_wal < (s.segno + 1) * size:
            raise WalCorruptError(f"WAL ends at {format_lsn(s.end_of_wal)} ({s.end_reason}) but "
                                  "later segments are archived", segment=name,
                                  lsn=s.end_of_wal)
        if s.last_lsn is not None:
            last = (s.last_lsn, tli, "the last record of the previous segment")


def _finish(spark: SparkSession, store: ObjectStore, layout: Layout, plan: BatchPlan,
            progress: Progress | None, state: _Inherited, results: list[PartitionResult],
            ends: _Ends, version: int, fence: Fence, own: _Objects,
            timings: _Timings) -> BatchResult:
    """Check the partitions agree, merge their runs into the stream, write the state, commit
    the progress (``fence`` checked before each: a run that lost its lease stops), then
    publish the batch."""
    fence.check()
    next_lsn = ends.next_lsn
    dictionaries = {r.dictionary for r in results}
    startups = {json.dumps(r.startup.to_json()) for r in results}
    if len(dictionaries) != 1 or len(startups) != 1:
        raise DecodingError(f"batch {plan.name}: reorder-buffer partitions ended with "
                            "different dictionaries or decoder states (a cdclake bug)")
    merged = _merge_runs(spark, store, own.changes, results)
    timings.lap("merge_runs")
    # a split transaction is emitted, in parts, by every partition holding one
    split = set().union(*(r.split_commits for r in results))
    commits = sum(r.commits for r in results) + len(split)
    token = layout.generation(own.generation)
    manifest = build_manifest(plan.name, plan.read_from, next_lsn, commits,
                              [(m.relation, [f"{token}/{p}" for p in m.paths], m.rows)
                               for m in merged])
    staged = manifest_bytes(manifest)
    store.put(layout.batch_manifest_key(plan.name, own.generation), staged)
    _clear(store, own.runs)
    store.put(own.dictionary, dictionaries.pop().encode())
    open_txns = sorted((t for r in results for t in r.open_txns), key=lambda t: t.xid)
    confirmed = max([state.confirmed_lsn, *(r.last_commit for r in results)])
    restart = min([t.first_lsn for t in open_txns], default=next_lsn)
    fence.check()
    saved = Progress(
        seq=plan.seq, batch=plan.name, next_lsn=next_lsn, last_segment=plan.segments[-1],
        timeline=plan.timeline, last_lsn=ends.last_lsn,
        confirmed_lsn=confirmed, restart_lsn=restart, start_lsn=state.start_lsn,
        db_oid=state.db_oid, version=version, segment_size=plan.segment_size,
        dictionary_key=own.dictionary, startup=results[0].startup, open_txns=open_txns,
        generation=own.generation)
    save_progress(store, layout, saved)
    publish(store, layout, saved, staged)
    _clear_carried(store, layout, plan.seq, open_txns)
    stats: dict[str, int] = {}
    for r in results:
        for k, v in r.stats.items():
            stats[k] = stats.get(k, 0) + v
    stats["peak_partition_changes"] = max(r.stats.get("changes", 0) for r in results)
    stats["split_txns"] = len(split)
    stats.update(timings)
    if stats.get("pure_python_partitions"):
        log.warning("decode: batch %s: %d of %d partitions ran the pure-Python decoder: their "
                    "executors could not load cdclake's compiled hot path (another Python or "
                    "platform than the driver's; the executor log says why)", plan.name,
                    stats["pure_python_partitions"], len(results))
    return BatchResult(plan.name, manifest, plan.read_from, next_lsn, commits, plan.segments,
                       stats)


def publish(store: ObjectStore, layout: Layout, progress: Progress,
            staged: bytes | None = None) -> None:
    """Make the batch ``progress`` committed what the lake reads: its generation's manifest
    (``staged``, else read back) copied to ``changes/<batch>/_manifest.json``, after the
    other generations' objects of the batch — an attempt that lost, or an earlier decode of a
    stream decoded again from the start — are removed. Idempotent: the committed progress
    decides every byte, so the run that committed it and any later run repairing a publish
    it did not finish write the same."""
    if progress.generation is None:  # committed before generations: its manifest is there
        return
    own = _Objects(layout, progress.batch, progress.generation)
    pointer = layout.batch_manifest_key(progress.batch)
    if staged is None:
        key = layout.batch_manifest_key(progress.batch, progress.generation)
        try:
            staged = store.get(key)
        except ObjectNotFound as exc:
            raise StoreError(f"batch {progress.batch}: the manifest {store.url(key)} its "
                             "committed progress names is missing; restore it, or remove the "
                             "progress to decode the stream from the start") from exc
    try:
        if store.get(pointer) == staged:
            return
    except ObjectNotFound:
        pass
    kept = (own.changes, own.spill, own.dictionary, pointer)
    for prefix in (layout.changes_prefix(progress.batch), layout.spill_prefix(progress.batch),
                   layout.dictionary_prefix(progress.batch)):
        for info in list(store.list(prefix)):
            if not info.key.startswith(kept):
                store.delete(info.key)
    store.put(pointer, staged)


def _merge_runs(spark: SparkSession, store: ObjectStore, root: str,
                results: list[PartitionResult]) -> list[MergedVersion]:
    """Stage two of commit emit (:func:`cdclake.spark.writer.merge_runs`), one task per
    relation version; the versions in the order of their first rows."""
    groups: dict[str, tuple[RelationVersion, list[list[str]]]] = {}
    for r in results:
        for run in r.runs:
            key = json.dumps(run.relation.to_json(), sort_keys=True)
            groups.setdefault(key, (run.relation, []))[1].append(run.keys)
    if not groups:
        return []
    jobs = list(groups.values())
    merged = spark.sparkContext.parallelize(jobs, len(jobs)).map(
        task(lambda job: merge_runs(store, root, job[0], job[1]))).collect()
    return sorted(merged, key=lambda m: m.first)


def _clear_carried(store: ObjectStore, layout: Layout, seq: int,
                   open_txns: list[OpenTxn]) -> None:
    """Remove the open transactions' objects nothing carries any more, once batch ``seq``,
    which took them over, is committed: a transaction's changes stay in the store, under the
    batch that stored them, as long as it is open (:mod:`cdclake.decoding.carry`). Only
    earlier batches' objects are looked at: a later batch's belong to a run that may be
    writing them now."""
    keep = {key for t in open_txns for key in t.spill}
    root = layout.spill_root()
    for info in list(store.list(root)):
        batch = info.key[len(root):].split("/", 1)[0]
        number = batch.split("-", 1)[0]
        if number.isdigit() and int(number) < seq and info.key not in keep:
            store.delete(info.key)


def _clear(store: ObjectStore, prefix: str) -> None:
    for info in list(store.list(prefix)):
        store.delete(info.key)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m cdclake.spark.job",
                                description="decode the next batch of archived WAL on Spark")
    p.add_argument("--until", help="last segment to include")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    config = Config.load()
    # the decode lease, as the pipeline's decode step takes it (a dry run writes nothing)
    with (Unfenced() if args.dry_run else Lease(
            open_store(config), DECODE, purpose="python -m cdclake.spark.job",
            ttl=config.lease_ttl, wait=config.lease_wait)) as lease:
        result = decode_batch(config, until_segment=args.until, dry_run=args.dry_run,
                              fence=lease)
    if result is None:
        print("nothing new to decode")
    elif isinstance(result, Waiting):
        print(result.reason)
    else:
        print(f"batch {result.batch}: {len(result.segments)} segments, {result.commits} "
              f"commits, {format_lsn(result.start_lsn)}..{format_lsn(result.end_lsn)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
