"""cdclake's decoder vs PostgreSQL's own (a test_decoding slot) on the same WAL.

For each workload: a fresh local PostgreSQL writes the WAL with a test_decoding slot created
after `cdclake source install`; then the slot decodes it (`pg_logical_slot_peek_changes`, C,
in the server) and cdclake decodes the archived segments (`decoding.parallel.decode_lines` with the
test_decoding plugin, output hashed, not stored): with the compiled hot paths in ``--jobs``
processes (``cdclake decode``'s default: the cores there are) and in one, and in pure Python
in one (cdclake.native). All produce the same bytes (checked by digest); reported: changes/s
for each, and the ratios ours/PostgreSQL's (the slot uses one core). Best of --repeat, the
four timed in turn in each round so a machine's changing speed touches them alike.

    .venv/bin/python bench/decode.py [--version 15|18] [--scale N] [--jobs N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdclake import native
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.install import install
from cdclake.catalog.signing import fetch_key
from cdclake.decoding.parallel import decode_lines, default_jobs
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.session import DecodeOptions, DecodeResult
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.wal.source import DirectorySource

WIDE_DDL = """
CREATE TABLE wide (
  id bigint PRIMARY KEY, a int, b int8, c numeric(12,2), d text, e varchar(40), f bool,
  g timestamptz, h date, i float8, j jsonb, k uuid, l int[], m text, n bytea, o int2,
  p numeric, q timestamp, r interval, s text)
"""

WIDE_LOAD = """
INSERT INTO wide SELECT i, i, i * 7, i / 3.0, md5(i::text), 'v' || i, i % 2 = 0,
  '2024-01-01'::timestamptz + i * interval '1 min', '2024-01-01'::date + (i % 1000),
  i / 7.0, jsonb_build_object('k', i, 'tags', jsonb_build_array('a', 'b')),
  md5(i::text)::uuid, ARRAY[i, i + 1, i + 2], repeat('x', 60), decode(md5(i::text), 'hex'),
  (i % 30000)::int2, i * 1.000001, '2024-01-01'::timestamp + i * interval '1 s',
  (i % 100) * interval '1 hour', 'tail ' || i
FROM generate_series(1, {rows}) i
"""

WIDE_CHURN = """
UPDATE wide SET a = a + 1, d = md5(d), j = j || '{"u": true}' WHERE id % 2 = 0;
DELETE FROM wide WHERE id % 10 = 0;
"""


@dataclass
class Run:
    workload: str
    jobs: int
    changes: int
    lines: int
    pg_seconds: float
    our_seconds: float  #: compiled hot paths, one process
    jobs_seconds: float  #: compiled hot paths, ``jobs`` processes
    python_seconds: float  #: pure Python, one process
    result: DecodeResult
    equal: bool

    def row(self) -> str:
        pg_rate = self.changes / self.pg_seconds
        cells = [f"{self.workload}", f"{self.changes:,}", f"{pg_rate:,.0f}"]
        for seconds in (self.jobs_seconds, self.our_seconds, self.python_seconds):
            rate = self.changes / seconds
            cells += [f"{rate:,.0f}", f"**{rate / pg_rate:.2f}**"]
        cells.append("yes" if self.equal else "NO")
        return "| " + " | ".join(cells) + " |"


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def _pgbench(pg: LocalPostgres, db: str, *args: str) -> None:
    subprocess.run([pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                    *args, db], check=True, capture_output=True)


def pgbench_init(pg: LocalPostgres, db: str, scale: int) -> None:
    _pgbench(pg, db, "-i", "-q", "-s", str(scale))
    pg.sql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY", db)


def tpcb(pg: LocalPostgres, db: str, scale: int) -> None:
    _pgbench(pg, db, "-c", "4", "-j", "2", "-t", str(2500 * scale), "-n")


def pgbench(pg: LocalPostgres, db: str, scale: int) -> None:
    pgbench_init(pg, db, scale)
    tpcb(pg, db, scale)


def wide(pg: LocalPostgres, db: str, scale: int) -> None:
    pg.sql(WIDE_DDL, db)
    pg.sql(WIDE_LOAD.format(rows=50_000 * scale), db)
    for stmt in WIDE_CHURN.split(";"):
        if stmt.strip():
            pg.sql(stmt, db)


Workload = Callable[[LocalPostgres, str, int], None]


def _nothing(pg: LocalPostgres, db: str, scale: int) -> None:
    pass


#: name -> (what runs before the WAL read starts, what is decoded). "pgbench" decodes
#: pgbench's initial load too (one transaction of 100,000 rows per scale); "pgbench
#: transactions" only its TPC-B-like transactions, 5 changes each, which is where several
#: decoding processes can share the work (each emits whole transactions).
WORKLOADS: dict[str, tuple[Workload, Workload]] = {
    "pgbench": (_nothing, pgbench), "pgbench transactions": (pgbench_init, tpcb),
    "wide rows": (_nothing, wide)}


def measure(version: int, name: str, scale: int, repeat: int, profile: bool,
            jobs: int) -> Run:
    base = Path(tempfile.mkdtemp(prefix="cdclake-bench-"))
    base.chmod(0o755)  # the server runs as postgres and must reach its data directory
    pg = LocalPostgres.create(version, base / "pg").start()
    try:
        db = pg.create_database("bench")
        before, workload = WORKLOADS[name]
        before(pg, db, scale)
        read_from = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        install(pg.dsn(db))
        start = parse_lsn(pg.sql("SELECT lsn::text FROM pg_create_logical_replication_slot("
                                 "'bench', 'test_decoding')", db)[0][0])
        workload(pg, db, scale)
        end = parse_lsn(pg.sql("SELECT pg_switch_wal()::text", db)[0][0])
        db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = 'bench'", db)[0][0]
        _wait_archived(pg, db)

        with pg.connect(db) as conn:
            key = fetch_key(conn)
        options = DecodeOptions(db_oid=db_oid, start_lsn=start, read_from=read_from,
                                end_lsn=end, spill_dir=base / "spill", ddl_key=key)

        def ours(jobs: int = 1) -> tuple[str, DecodeResult]:
            sink = _Sink()
            result = decode_lines(DirectorySource(pg.archive_dir), Dictionary(), options,
                                  lambda d, v, write: TestDecoding(write, d.types, version=v),
                                  sink, jobs=jobs)  # type: ignore[arg-type]
            return sink.h.hexdigest(), result

        def parallel() -> tuple[str, DecodeResult]:
            return ours(jobs)

        def python() -> tuple[str, DecodeResult]:
            with native.use_python():
                return ours()

        if profile:
            prof = cProfile.Profile()
            prof.runcall(ours)
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        runs = {"ours": ours, "jobs": parallel, "python": python}
        times: dict[str, list[float]] = {"pg": [], **{k: [] for k in runs}}
        digests = set()
        for _ in range(repeat):
            t, (lines, changes, expected) = timed(lambda: peek_slot(pg, db))  # type: ignore[misc]
            times["pg"].append(t)
            for k, fn in runs.items():
                t, (actual, result) = timed(fn)  # type: ignore[misc]
                times[k].append(t)
                digests.add(actual)
        return Run(name, jobs, changes, lines, min(times["pg"]), min(times["ours"]),
                   min(times["jobs"]), min(times["python"]), result, digests == {expected})
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


class _Digest:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.lines = 0
        self.changes = 0

    def add(self, line: str) -> None:
        self.h.update(line.encode("utf-8", "surrogateescape"))
        self.h.update(b"\n")
        self.lines += 1
        if line.startswith("table "):
            self.changes += 1

    def value(self) -> tuple[int, int, str]:
        return self.lines, self.changes, self.h.hexdigest()


class _Sink:
    """What ``cdclake decode`` would write, hashed instead of stored."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, b: bytes) -> None:
        self.h.update(b)

    def flush(self) -> None:
        pass


def _digest(lines: object) -> tuple[int, int, str]:
    d = _Digest()
    for line in lines:  # type: ignore[attr-defined]
        d.add(line)
    return d.value()


def peek_slot(pg: LocalPostgres, db: str) -> tuple[int, int, str]:
    """PostgreSQL's decoder on the WAL since slot ``bench`` was made (``test_decoding``,
    peeked: the slot stays where it is): lines, changes and the digest of the lines."""
    with pg.connect(db) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        return _digest(r[0] for r in conn.execute(
            "SELECT data FROM pg_logical_slot_peek_changes('bench', NULL, NULL, "
            "'include-xids', '1', 'skip-empty-xacts', '1')"))


def _wait_archived(pg: LocalPostgres, db: str, timeout: float = 300) -> None:
    ready = pg.data_dir / "pg_wal" / "archive_status"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not list(ready.glob("*.ready")):
            return
        time.sleep(0.2)
    raise TimeoutError("WAL was not archived in time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=15, choices=(15, 18))
    ap.add_argument("--scale", type=int, default=2, help="workload size multiplier")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    ap.add_argument("--profile", action="store_true", help="cProfile one decode of each")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help="processes of the parallel run (default: the cores there are)")
    args = ap.parse_args()
    print(f"PostgreSQL {args.version}, scale {args.scale}, best of {args.repeat}, "
          f"{default_jobs()} cores")
    if not native.twins():
        print("cdclake's compiled hot paths are not built: every cdclake column is Python")
    print(f"| workload | changes | PostgreSQL changes/s | cdclake --jobs {args.jobs} changes/s "
          "| ratio | cdclake --jobs 1 changes/s | ratio | pure Python, --jobs 1 changes/s "
          "| ratio | same output |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.workload or list(WORKLOADS):
        run = measure(args.version, name, args.scale, args.repeat, args.profile, args.jobs)
        print(run.row(), flush=True)


if __name__ == "__main__":
    main()
