"""The Spark decode job against a single-process decode of the same WAL (PostgreSQL 15, 18)."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.archive.lease import DECODE, Lease
from cdclake.archive.local import LocalStore
from cdclake.archive.store import ObjectInfo
from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.errors import ConcurrentRunError, UnknownRelationError
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import format_lsn, parse_segment_name
from cdclake.pipeline import steps
from cdclake.spark import job
from cdclake.spark.job import decode_batch
from cdclake.stream.progress import load_progress
from tests.e2e.spark import workload
from tests.e2e.spark.helpers import local_decode, rows, ship_to, tables_of
from tests.e2e.spark.workload import (
    FILL,
    SEGMENT_SIZE,
    SETUP,
    Archived,
    archive_current,
    run,
    start,
)

pytestmark = pytest.mark.e2e


def _config(tmp_path: Path, name: str, dsn: str, work_mem: int = 64 << 20) -> Config:
    home = tmp_path / name
    return Config(home=home, store_url=(home / "store").as_uri(), source_dsn=dsn,
                  spark_partitions=2, spill_dir=home / "spill", work_mem=work_mem)


def _without_batch(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest but its batch name, its parts' paths without the decode's generation
    (``g0000000000/``: a Spark decode's objects are under its lease's generation)."""
    out = json.loads(json.dumps({k: v for k, v in manifest.items() if k != "batch"}))
    for table in out["tables"]:
        for version in table["versions"]:
            version["paths"] = [p.split("/", 1)[1] if p.startswith("g") else p
                                for p in version["paths"]]
    return out


@pytest.fixture
def archived(pg: LocalPostgres, database: str, tmp_path: Path) -> Archived:
    return run(pg, database, tmp_path / "wal")


def test_one_batch_equals_single_process_decode(pg: LocalPostgres, archived: Archived,
                                                tmp_path: Path, spark: Any) -> None:
    expected_manifest = local_decode(archived, tmp_path / "ref", tmp_path / "ref-spill")
    expected = tables_of(tmp_path / "ref", ["local"])
    assert {"public.acct", "public.logs", "public.nothing", "public.big"} <= set(expected)
    assert len(archived.segments) >= 4, "the workload must span several segments"

    config = _config(tmp_path, "spark", pg.dsn(archived.database))
    ship_to(config, archived)
    result = decode_batch(config, spark=spark)
    assert result is not None
    assert result.segments == archived.segments
    assert _without_batch(result.manifest) == _without_batch(expected_manifest)
    got = tables_of(Path(config.home) / "store" / "changes", [result.batch])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert got[name].schema == table.schema, name
        assert rows(got[name]) == rows(table), name
    # the large transactions (the 1 MiB fills, one after a TRUNCATE) were split by stripes
    # of WAL, each decoded on both partitions, and the rows equal all the same (one TRUNCATE
    # row); the busiest partition decoded at least its share, and not everything
    per_commit = Counter(r[stream.COMMIT_LSN] for t in expected.values() for r in rows(t))
    busiest, changes = result.stats["peak_partition_changes"], result.stats["changes"]
    assert result.stats["split_txns"] >= 2
    assert [r[stream.OP] for r in rows(got["public.logs"])].count(stream.OP_TRUNCATE) == 1
    assert busiest < changes, (per_commit.most_common(1), busiest)
    assert busiest * config.spark_partitions >= changes
    # the workload's content really is there
    ops = rows(expected["public.nothing"])
    assert [r[stream.OP] for r in ops] == ["I"] * 5 + ["U", "D"]
    assert all(r[stream.OLD_KEY] is None for r in ops)
    rewritten = [r for r in rows(expected["public.acct"]) if r.get("note") == "after rewrite"]
    assert len(rewritten) == 3  # decoded under the relfilenode VACUUM FULL gave acct
    # the ADD COLUMN committed while the long transaction was open
    assert "flag" in expected["public.big"].column_names
    big = [r for r in rows(expected["public.big"]) if r[stream.OP] == "U"]
    assert big and big[0][stream.UNCHANGED_TOAST] == ["doc"]
    # nothing new: a second run decodes nothing and leaves the progress alone
    store = open_store(config)
    before = load_progress(store, Layout())
    assert decode_batch(config, spark=spark) is None
    assert load_progress(store, Layout()) == before
    # a crash before the progress was saved: the batch is decoded again, identically
    store.delete(Layout().progress_log_key(before.seq))
    store.delete(Layout().progress_key())
    dry = decode_batch(config, spark=spark, dry_run=True)
    assert dry is not None and dry.batch == result.batch and dry.manifest == {}
    again = decode_batch(config, spark=spark)
    assert again is not None and again.batch == result.batch
    assert again.manifest == result.manifest
    assert {k: rows(v) for k, v in tables_of(Path(config.home) / "store" / "changes",
                                             [again.batch]).items()} == \
        {k: rows(v) for k, v in got.items()}


def test_batches_cut_at_segment_boundaries_equal_one_batch(pg: LocalPostgres,
                                                           archived: Archived, tmp_path: Path,
                                                           spark: Any) -> None:
    one = _config(tmp_path, "one", pg.dsn(archived.database))
    ship_to(one, archived)
    whole = decode_batch(one, spark=spark)
    assert whole is not None

    # a tiny work_mem: partitions spill locally too, on top of the carried-over spill files
    cut = _config(tmp_path, "cut", pg.dsn(archived.database), work_mem=4096)
    ship_to(cut, archived)
    store = open_store(cut)
    segs = archived.segments
    batches = []
    carried = 0
    for until in (segs[0], segs[1], segs[3], None):
        result = decode_batch(cut, spark=spark, until_segment=until)
        assert result is not None, (until, load_progress(store, Layout()))
        batches.append(result)
        progress = load_progress(store, Layout())
        assert progress is not None
        carried += sum(1 for t in progress.open_txns if t.spill)
        for t in progress.open_txns:  # the spill objects the next batch restores exist
            assert all(store.exists(k) for k in t.spill)
    assert carried, "no transaction was open across a cut: the test would prove nothing"
    assert sum(b.stats["spilled_changes"] for b in batches) > 0
    assert [s for b in batches for s in b.segments] == segs
    assert batches[0].start_lsn == whole.start_lsn and batches[-1].end_lsn == whole.end_lsn
    for a, b in itertools.pairwise(batches):
        assert a.end_lsn == b.start_lsn
    assert sum(b.commits for b in batches) == whole.commits
    root = Path(cut.home) / "store" / "changes"
    expected = tables_of(Path(one.home) / "store" / "changes", [whole.batch])
    got = tables_of(root, [b.batch for b in batches])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert rows(got[name]) == rows(table), name
    # every spill object but the last batch's is gone, and nothing is left open at the end
    final = load_progress(store, Layout())
    assert final is not None and final.open_txns == []
    assert final.confirmed_lsn == max(
        max(r[stream.COMMIT_LSN] for r in rows(t)) for t in expected.values())
    assert decode_batch(cut, spark=spark) is None
    leftovers = [i.key for i in store.list("spill/")]
    assert leftovers == [], leftovers
    json.dumps(final.to_json())  # progress is plain JSON


def test_large_transactions_open_across_cuts_are_carried_in_parts(
        pg: LocalPostgres, database: str, tmp_path: Path, spark: Any) -> None:
    """Two bulk loads longer than a batch, cut at every segment: each is split by stripes in
    every batch, each partition carrying its part to the next. The second writes TOAST
    chunks at its end, so the batch that holds them gives it whole to its owner, which
    reunites the parts. The batches equal a single-process decode of the WAL."""
    first = start(pg, database, SETUP)
    xids = []
    with pg.connect(database) as load:
        for toast in (False, True):
            load.execute("BEGIN")
            xids.append(int(load.execute("SELECT txid_current()").fetchone()[0]))
            for _ in range(3):
                load.execute(FILL)
            if toast:
                load.execute("INSERT INTO big SELECT i, string_agg(md5(i::text || j::text), "
                             "'') FROM generate_series(1, 3) i, generate_series(1, 200) j "
                             "GROUP BY i")
            load.execute("COMMIT")
    last = archive_current(pg, database)
    arch = workload.archived(pg, database, first, last, tmp_path / "wal")
    local_decode(arch, tmp_path / "ref", tmp_path / "ref-spill")
    expected = tables_of(tmp_path / "ref", ["local"])
    assert "public.big" in expected

    cut = _config(tmp_path, "cut", pg.dsn(arch.database))
    ship_to(cut, arch)
    store = open_store(cut)
    batches, parted = [], set()
    kept: dict[tuple[int, int | None], tuple[str, ...]] = {}
    longest = 0
    for until in arch.segments:
        result = decode_batch(cut, spark=spark, until_segment=until)
        assert result is not None
        batches.append(result.batch)
        progress = load_progress(store, Layout())
        assert progress is not None
        parts = {(t.xid, t.part) for t in progress.open_txns if t.part is not None}
        assert all(store.exists(k) for t in progress.open_txns for k in t.spill)
        for t in progress.open_txns:  # what earlier batches stored is carried by its keys
            before = kept.get((t.xid, t.part), ())
            assert t.spill[:len(before)] == before or len(t.spill) == 1, (before, t.spill)
            longest = max(longest, len(t.spill))
        kept = {(t.xid, t.part): t.spill for t in progress.open_txns}
        parted |= {x for x, _ in parts}
        if parts:  # every partition carries a part
            assert {p for _, p in parts} == set(range(cut.spark_partitions))
    assert set(xids) <= parted, (xids, parted)
    assert longest > 1  # a part open across batches named what several of them stored
    got = tables_of(Path(cut.home) / "store" / "changes", batches)
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert rows(got[name]) == rows(table), name
    assert load_progress(store, Layout()).open_txns == []  # type: ignore[union-attr]


def test_a_backlog_is_decoded_as_bounded_batches_in_one_step(pg: LocalPostgres,
                                                            archived: Archived, tmp_path: Path,
                                                            spark: Any) -> None:
    """``max_batch_segments`` cuts the archive into batches of two segments; the decode step
    takes them all, one after the other, and together they are the one-batch stream."""
    one = _config(tmp_path, "one", pg.dsn(archived.database))
    ship_to(one, archived)
    whole = decode_batch(one, spark=spark)
    assert whole is not None

    bounded = _config(tmp_path, "bounded", pg.dsn(archived.database)).replace(
        max_batch_segments=2)
    ship_to(bounded, archived)
    out = steps.decode(bounded, spark=spark)
    segs = archived.segments
    assert len(out["batches"]) == (len(segs) + 1) // 2 >= 2, out["batches"]
    assert out["segments"] == segs and out["commits"] == whole.commits
    assert out["end_lsn"] == format_lsn(whole.end_lsn)
    progress = load_progress(open_store(bounded), Layout())
    assert progress is not None and progress.seq == len(out["batches"])
    expected = tables_of(Path(one.home) / "store" / "changes", [whole.batch])
    got = tables_of(Path(bounded.home) / "store" / "changes", out["batches"])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert rows(got[name]) == rows(table), name
    assert steps.decode(bounded, spark=spark)["batch"] is None


def test_python_workers_find_pyspark_and_the_decode_loaded(spark: Any) -> None:
    """A worker is forked from cdclake's daemon, which imported pyspark from the installed
    package (not Spark's zip, compiled anew at every start), the session's task modules and
    the pandas pyarrow converts with, and froze them out of the garbage collector: a task that
    names none of them finds them loaded, and the collection pyspark runs after each task
    walks none of them."""

    def probe(_: Iterator[int]) -> Iterator[tuple[str, bool, bool, bool, bool]]:
        import gc
        import sys

        loaded = [vars(sys.modules[m]) for m in ("cdclake.spark.job", "pandas")
                  if m in sys.modules]
        collectable = {id(o) for o in gc.get_objects()}  # not the frozen ones
        yield (sys.modules["pyspark"].__file__ or "", "cdclake.sparkenv.daemon" in sys.modules,
               "cdclake.spark.job" in sys.modules, "pandas" in sys.modules,
               len(loaded) == 2 and not any(id(d) in collectable for d in loaded))

    seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()
    assert len(seen) == 2
    for pyspark_file, daemon, decode, pandas, frozen in seen:
        assert ".zip" not in pyspark_file and daemon and decode and pandas and frozen, seen


def test_spark_settings_reach_a_new_session(tmp_path: Path) -> None:
    """``CDCLAKE_SPARK_CONF`` is applied when cdclake starts Spark (a fresh JVM: the driver's
    memory can only be set there)."""
    probe = ("from cdclake.config import Config\n"
             "from cdclake.sparkenv.session import session\n"
             "conf = session(Config.load(), 'test').sparkContext.getConf()\n"
             "print(conf.get('spark.driver.memory'), conf.get('spark.driver.maxResultSize'))")
    env = {**os.environ, "CDCLAKE_HOME": str(tmp_path),
           "CDCLAKE_SPARK_CONF": "spark.driver.memory=1g,spark.driver.maxResultSize=64m"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert out.split()[-2:] == ["1g", "64m"], out


def test_one_batch_over_s3(pg: LocalPostgres, archived: Archived, tmp_path: Path, spark: Any,
                           s3_config: Config) -> None:
    local = _config(tmp_path, "local", pg.dsn(archived.database))
    ship_to(local, archived)
    ref = decode_batch(local, spark=spark, until_segment=archived.segments[1])
    assert ref is not None

    config = s3_config.replace(source_dsn=pg.dsn(archived.database), spark_partitions=2)
    ship_to(config, archived)
    result = decode_batch(config, spark=spark, until_segment=archived.segments[1])
    assert result is not None
    assert _without_batch(result.manifest) == _without_batch(ref.manifest)
    from cdclake.archive.arrowfs import arrow_filesystem

    store = open_store(config)
    fs, root = arrow_filesystem(config, store.url(Layout().changes_root()))
    got = tables_of(root, [result.batch], fs)
    expected = tables_of(Path(local.home) / "store" / "changes", [ref.batch])
    assert {k: rows(v) for k, v in got.items()} == {k: rows(v) for k, v in expected.items()}
    progress = load_progress(store, Layout())
    assert progress is not None and any(t.spill for t in progress.open_txns)


class _Clock:
    """The leases' clock: a run's lease expires when the test says so."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class _StalledStore(LocalStore):
    """The store of a run that stalls (a paused VM, a hung request) at its first listing under
    ``prefix`` until ``go`` is set. Spark tasks get it pickled as the plain store."""

    def __init__(self, root: Path, prefix: str) -> None:
        super().__init__(root)
        self.prefix = prefix
        self.reached = threading.Event()
        self.go = threading.Event()

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if prefix.startswith(self.prefix) and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(600)
        return super().list(prefix)

    def __reduce__(self) -> tuple[Any, ...]:
        return LocalStore, (self.root,)


class _StalledFence:
    """Run A's fence: its lease's check, after which it stalls once — it checked, then lost
    the lease before it acted (the window a check cannot close)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.generation = lease.generation
        self.reached = threading.Event()
        self.go = threading.Event()

    def check(self) -> None:
        self.lease.check()
        if not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(600)


def _objects(store: LocalStore) -> dict[str, bytes]:
    return {i.key: store.get(i.key) for i in store.list() if not i.key.startswith("state/")}


@pytest.mark.parametrize("pg", [15], indirect=True)  # the race is the same over any WAL
@pytest.mark.parametrize("stall", ["before it wrote anything", "after its lease check"])
def test_a_decode_that_lost_its_lease_leaves_the_new_holders_batch_alone(
        pg: LocalPostgres, database: str, tmp_path: Path, spark: Any, stall: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A holds the decode lease and decodes the first batch (one segment); it stalls, its
    lease expires, run B takes the lease and decodes the first batch (two segments, with
    transactions open at its end) to the end. Then A wakes and goes on. Whatever A does, the
    store still holds B's batch, B's dictionary and B's open transactions exactly as B
    committed them, and A says it lost the lease."""
    archived = run(pg, database, tmp_path / "wal")
    config = _config(tmp_path, "race", pg.dsn(archived.database))
    ship_to(config, archived)
    root = Path(config.home) / "store"
    store, clock, segs = LocalStore(root), _Clock(), archived.segments
    a = Lease(store, DECODE, purpose="run A", ttl=3600, wait=0, clock=clock).acquire()
    a_failed: list[BaseException] = []

    def run_a() -> None:
        try:
            decode_batch(config, spark=spark, until_segment=segs[0], fence=a_fence)
        except BaseException as exc:  # what A ends with, checked below
            a_failed.append(exc)

    thread = threading.Thread(target=run_a)
    stalled: _StalledStore | _StalledFence
    a_fence: Lease | _StalledFence
    if stall == "before it wrote anything":  # A's store stalls at its first spill listing
        stalled, a_fence, real_open = _StalledStore(root, "spill/"), a, job.open_store
        monkeypatch.setattr(job, "open_store", lambda c: stalled if (
            threading.current_thread() is thread) else real_open(c))
    else:
        stalled = a_fence = _StalledFence(a)
    thread.start()
    assert stalled.reached.wait(600)

    clock.now += 3601  # A's lease expires: B takes over and decodes
    with Lease(store, DECODE, purpose="run B", ttl=3600, wait=0, clock=clock) as b:
        assert b.generation == a.generation + 1
        result = decode_batch(config, spark=spark, until_segment=segs[1], fence=b)
    assert result is not None and result.segments == segs[:2]
    progress = load_progress(store, Layout())
    assert progress is not None and any(t.spill for t in progress.open_txns)
    committed = _objects(store)

    stalled.go.set()  # A wakes up
    thread.join(600)
    assert len(a_failed) == 1 and isinstance(a_failed[0], ConcurrentRunError), a_failed
    assert "lost the decode lease" in str(a_failed[0])
    assert _objects(store) == committed  # nothing of B's touched, nothing of A's left
    assert load_progress(store, Layout()) == progress
    for t in progress.open_txns:
        assert all(store.exists(k) for k in t.spill)
    a.release()


@pytest.mark.parametrize("pg", [15], indirect=True)  # the path of an error is the same on 18
def test_a_cdclake_error_in_a_decode_task_comes_back_as_itself(
        pg: LocalPostgres, archived: Archived, tmp_path: Path, spark: Any) -> None:
    """Decoders given another key than the source's believe none of its schema messages, so
    the first row decoded (in a partition's task, a Python worker) is of a relfilenode nothing
    explains. The driver raises that UnknownRelationError — its class, its one line, its
    attributes — not Py4J's page of Java and Python traces, and nothing is committed."""
    config = _config(tmp_path, "other-key", pg.dsn(archived.database))
    key = tmp_path / "other.key"
    key.write_text(os.urandom(64).hex())
    key.chmod(0o600)
    config = config.replace(ddl_key_file=key)
    ship_to(config, archived)
    first = parse_segment_name(archived.segments[0], SEGMENT_SIZE).segno * SEGMENT_SIZE
    with pytest.raises(UnknownRelationError) as raised:
        decode_batch(config, spark=spark, start_lsn=first, db_oid=archived.db_oid)
    error = raised.value
    assert type(error) is UnknownRelationError
    assert re.fullmatch(r"unknown relation: relfilenode \S+ at LSN [0-9A-F]+/[0-9A-F]+ is not "
                        r"in the dictionary; run `cdclake source install` on the source and "
                        r"decode from WAL that includes the install(\. .*)?", str(error)), error
    assert error.lsn >= first and format_lsn(error.lsn) in str(error)
    store = open_store(config)
    assert load_progress(store, Layout()) is None
    assert not [o.key for prefix in ("changes/", "spill/", "dictionary/")
                for o in store.list(prefix)], "the failed attempt left objects"
