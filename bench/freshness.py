"""Commit → queryable: how long a committed row takes to be readable in its mirror, with
`cdclake run --follow` keeping up with a busy source.

A fresh PostgreSQL 15 with ``archive_timeout`` (default 10 s) archives into a directory;
`cdclake source install` after pgbench's tables (scale 1) and a ``marker`` table exist. Then
`cdclake run --follow` starts on ``local[2]`` (``spark.driver.memory=1g``; its first run
takes the initial snapshot), and for --seconds:

- pgbench runs rate-limited (``-R``, default 400 tx/s, 2 clients);
- a marker row is committed every 0.5 s, its commit time taken when COMMIT returned;
- a reader polls the marker mirror through DuckDB (an Iceberg reader cdclake did not write),
  noting when each marker is first seen.

Then the writers stop, the reader waits until every marker is seen (or --drain seconds
pass: the missing are counted), the follower gets SIGTERM and must exit 0, and every mirror
is compared with its source through DuckDB (row count and column sums). Printed: commit →
queryable p50 / p95 / max (goal: p95 ≤ 20 s), markers missing, the follower's runs and its
exit, the peak RSS of its processes.

    .venv/bin/python bench/freshness.py [--seconds 120] [--rate 400] [--archive-timeout 10]
        [--poll 2] [--merge-engine pyiceberg|spark]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from scale import Peak

from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.local.postgres import LocalPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support import duck

#: per table, the aggregates compared between the source and its mirror
CHECKS = {"pgbench_accounts": "count(*), sum(aid), sum(abalance)",
          "pgbench_branches": "count(*), sum(bbalance)",
          "pgbench_tellers": "count(*), sum(tbalance)",
          "pgbench_history": "count(*), sum(id), sum(delta)",
          "marker": "count(*), sum(id)"}
#: set once the writers stopped and every marker was seen (or the drain timed out)
reader_stop = threading.Event()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=int, default=400, help="pgbench transactions per second")
    ap.add_argument("--archive-timeout", type=int, default=10)
    ap.add_argument("--poll", type=float, default=2.0, help="CDCLAKE_FOLLOW_POLL")
    ap.add_argument("--drain", type=float, default=120,
                    help="seconds to wait for the last markers after the writers stop")
    ap.add_argument("--merge-engine", default="pyiceberg")
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="cdclake-fresh-"))
    base.chmod(0o755)  # the server runs as postgres
    pg = LocalPostgres.create(15, base_dir=base / "pg",
                              settings={"archive_timeout": f"{args.archive_timeout}s"}).start()
    follower: subprocess.Popen[str] | None = None
    try:
        db = pg.create_database("fresh")
        pgbench = [pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]
        subprocess.run([*pgbench, "-i", "-q", "-s", "1", db], check=True, capture_output=True)
        pg.sql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY", db)
        pg.sql("CREATE TABLE marker (id int PRIMARY KEY, at timestamptz)", db)
        install(pg.dsn(db))
        # a server just started honours archive_timeout only from its first checkpoint on
        pg.sql("CHECKPOINT")
        home = base / "home"
        env = {**os.environ, "CDCLAKE_HOME": str(home), "CDCLAKE_SOURCE_DSN": pg.dsn(db),
               "CDCLAKE_ARCHIVE_DIR": str(pg.archive_dir),
               "CDCLAKE_STORE_URL": (base / "store").as_uri(),
               "CDCLAKE_SPARK_MASTER": "local[2]",
               "CDCLAKE_SPARK_CONF": "spark.driver.memory=1g,spark.driver.maxResultSize=64m",
               "CDCLAKE_FOLLOW_POLL": str(args.poll),
               "CDCLAKE_MERGE_ENGINE": args.merge_engine}
        config = Config.load(env=env)
        log = (base / "follow.log").open("w")
        follower = subprocess.Popen(
            [str(Path(sys.executable).parent / "cdclake"), "run", "--follow"], env=env,
            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        peak = Peak(follower.pid)
        peak.start()
        runs: list[str] = []
        threading.Thread(target=lambda: runs.extend(follower.stdout or ()), daemon=True).start()
        started = time.monotonic()
        while not runs:  # the first run: the initial snapshot
            if follower.poll() is not None or time.monotonic() - started > 300:
                raise SystemExit(f"the follower's first run did not finish; see {log.name}")
            time.sleep(0.5)
        print(f"follower ready after {time.monotonic() - started:.1f} s "
              f"(Spark start and the initial snapshot)")

        committed: dict[int, float] = {}
        seen: dict[int, float] = {}
        done = threading.Event()
        writer = subprocess.Popen([*pgbench, "-n", "-c", "2", "-j", "2", "-R", str(args.rate),
                                   "-T", str(int(args.seconds)), db],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        marks = threading.Thread(target=_markers, args=(pg.dsn(db), committed, done))
        reader = threading.Thread(target=_reader, args=(config, committed, seen, done))
        marks.start()
        reader.start()
        time.sleep(args.seconds)
        done.set()
        marks.join()
        writer.wait()
        deadline = time.monotonic() + args.drain
        while len(seen) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.5)
        reader_stop.set()
        reader.join()

        stopping = time.monotonic()
        follower.send_signal(signal.SIGTERM)
        status = follower.wait(timeout=300)
        stop_seconds = time.monotonic() - stopping
        peak.stop()
        latencies = sorted(seen[i] - committed[i] for i in seen)
        missing = len(committed) - len(seen)
        q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else \
            (latencies or [float("nan")]) * 99
        print("| markers | seen | missing | p50 s | p95 s | max s | follower runs | "
              "SIGTERM → exit | peak RSS MiB (driver/jvm/worker) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
        print(f"| {len(committed)} | {len(seen)} | {missing} | {q[49]:.1f} | {q[94]:.1f} | "
              f"{latencies[-1] if latencies else float('nan'):.1f} | {len(runs)} | "
              f"{status} in {stop_seconds:.1f} s | "
              + "/".join(f"{peak.kib[k] // 1024}" for k in ("driver", "jvm", "worker")) + " |")
        print("".join(runs[-3:]), end="")
        equal = _compare(pg, db, config)
        print("mirrors equal to the source (DuckDB): " + ("yes" if equal else "NO"))
        if status != 0 or missing or not equal:
            raise SystemExit(1)
    finally:
        if follower is not None and follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)



def _markers(dsn: str, committed: dict[int, float], done: threading.Event) -> None:
    """A marker row every 0.5 s, each in its own transaction; its commit time noted when
    COMMIT returned."""
    with psycopg.connect(dsn, autocommit=True) as con:
        i = 0
        while not done.wait(0.5):
            i += 1
            con.execute("INSERT INTO marker VALUES (%s, clock_timestamp())", (i,))
            committed[i] = time.time()


def _reader(config: Config, committed: dict[int, float], seen: dict[int, float],
            done: threading.Event) -> None:
    """Poll the marker mirror through DuckDB; note when each marker is first seen."""
    catalog = open_catalog(config)
    con = duck.connect()
    name = f"{config.namespace}.public__marker"
    location = None
    while not reader_stop.wait(0.25):
        try:
            table = catalog.load_table(name)
        except Exception:  # not created yet
            continue
        if table.metadata_location == location:
            continue
        location = table.metadata_location
        now = time.time()
        for row in duck.read_table(table, con).column("id").to_pylist():
            seen.setdefault(row, now)


def _compare(pg: LocalPostgres, db: str, config: Config) -> bool:
    catalog = open_catalog(config)
    con = duck.connect()
    equal = True
    for table, aggs in CHECKS.items():
        source = pg.sql(f"SELECT {aggs} FROM {table}", db)[0]
        mirror = catalog.load_table(f"{config.namespace}.public__{table}")
        con.register("t", duck.read_table(mirror, con))
        lake = con.execute(f"SELECT {aggs} FROM t").fetchone()
        con.unregister("t")
        same = [None if v is None else int(v) for v in source] == \
            [None if v is None else int(v) for v in lake or ()]
        equal &= same
        print(f"{table}: source {source} mirror {lake}{'' if same else '  DIFFERENT'}")
    return equal


if __name__ == "__main__":
    main()
