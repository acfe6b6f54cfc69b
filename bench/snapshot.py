"""cdclake's initial snapshot vs a plain `COPY ... TO STDOUT` of the same tables.

A fresh local PostgreSQL gets a narrow pgbench-like table and a 20-column wide one with
--rows rows each, then `cdclake source install` (data first, as on a database that already
has some). For each table, and for both together, two numbers:

- COPY: `COPY t TO STDOUT` read by psycopg block by block into nothing, one session, tables
  one after the other — the floor of what reading the rows costs the source and the client;
- snapshot: `snapshot_tables(config, spark=...)` on a local[2] Spark session into a fresh
  local warehouse (exported snapshot, chunks by ctid, COPY's binary format decoded into the
  change stream's values, Parquet, one Iceberg commit per table). The call is timed whole;
  the Spark session is created before, and its start-up printed on its own.

Reported: rows/s of each and the ratio snapshot/COPY (goal: >= 1.0 with both cores). Best of
--repeat. Also timed: a snapshot call of an empty table (the cost of a call besides its rows:
the snapshot's export, the Spark job, the Iceberg commit — some 0.2-0.4 s, which at 1M rows
of the narrow table is as long as COPY takes, hence 4M rows a table by default).
--profile runs each table's chunks in this process (copy_chunk, no Spark) under cProfile and
prints where the executor's time goes, and the driver's side of the empty-table call.

    .venv/bin/python bench/snapshot.py [--version 15|18] [--rows N] [--chunk-size 256MB]
        [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from decode import WIDE_DDL, WIDE_LOAD

from cdclake.catalog.export import export_snapshot, followed_tables
from cdclake.catalog.install import install
from cdclake.config import Config, parse_size
from cdclake.lake.catalog import open_catalog
from cdclake.local.postgres import LocalPostgres
from cdclake.snapshot.chunks import ChunkTask, copy_chunk
from cdclake.snapshot.driver import _plan, snapshot_tables
from cdclake.sparkenv.session import session

#: pgbench_accounts' shape: three integers and a blank-padded char(84)
NARROW_DDL = """
CREATE TABLE accounts (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL,
                       filler char(84))
"""

NARROW_LOAD = """
INSERT INTO accounts SELECT i, (i - 1) / 100000 + 1, 0, '' FROM generate_series(1, {rows}) i
"""

#: a table without rows: what a snapshot call costs besides copying rows
EMPTY_DDL = "CREATE TABLE empty (id int PRIMARY KEY, v text)"

TABLES = ("public.accounts", "public.wide")
EMPTY = "public.empty"


@dataclass
class Row:
    name: str
    rows: int
    copy_seconds: float
    snapshot_seconds: float
    chunks: int

    def line(self) -> str:
        copy_rate = self.rows / self.copy_seconds
        snap_rate = self.rows / self.snapshot_seconds
        return (f"| {self.name} | {self.rows:,} | {self.chunks} | {copy_rate:,.0f} | "
                f"{snap_rate:,.0f} | {snap_rate / copy_rate:.2f} |")


def best(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    times = []
    value: Any = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def load(pg: LocalPostgres, db: str, rows: int) -> None:
    pg.sql(NARROW_DDL, db)
    pg.sql(NARROW_LOAD.format(rows=rows), db)
    pg.sql(WIDE_DDL, db)
    pg.sql(WIDE_LOAD.format(rows=rows), db)
    pg.sql(EMPTY_DDL, db)
    pg.sql("VACUUM ANALYZE", db)  # hint bits set and visibility map built, as on a live table


def copy_out(pg: LocalPostgres, db: str, tables: Sequence[str]) -> int:
    """`COPY t TO STDOUT` of each table in turn, blocks read and dropped; the rows seen."""
    rows = 0
    with pg.connect(db) as conn, conn.cursor() as cur:
        for table in tables:
            with cur.copy(f"COPY {table} TO STDOUT") as copy:
                for _ in copy:
                    pass
            rows += cur.rowcount
    return rows


def config_for(pg: LocalPostgres, db: str, home: Path, tables: Sequence[str],
               chunk_size: int) -> Config:
    return Config(home=home, source_dsn=pg.dsn(db), store_url=(home / "store").as_uri(),
                  spark_master="local[2]", spark_partitions=2, tables=list(tables),
                  snapshot_chunk_size=chunk_size)


def snapshot(pg: LocalPostgres, db: str, base: Path, spark: Any, tables: Sequence[str],
             chunk_size: int) -> dict[str, Any]:
    """One snapshot call into a fresh warehouse (and catalog)."""
    home = Path(tempfile.mkdtemp(prefix="lake-", dir=base))
    return snapshot_tables(config_for(pg, db, home, tables, chunk_size), spark=spark)


def measure(pg: LocalPostgres, db: str, base: Path, spark: Any, tables: Sequence[str],
            chunk_size: int, repeat: int) -> tuple[Row, dict[str, Any]]:
    copy_seconds, copied = best(repeat, lambda: copy_out(pg, db, tables))
    snapshot_seconds, result = best(
        repeat, lambda: snapshot(pg, db, base, spark, tables, chunk_size))
    if result["rows"] != copied:
        raise SystemExit(f"{', '.join(tables)}: the snapshot copied {result['rows']} rows, "
                         f"COPY {copied}")
    name = tables[0] if len(tables) == 1 else "all tables"
    chunks = sum(t["chunks"] for t in result["tables"])
    return Row(name, copied, copy_seconds, snapshot_seconds, chunks), result


@contextmanager
def chunk_tasks(pg: LocalPostgres, db: str, base: Path, table: str, chunk_size: int,
                run: str) -> Iterator[list[ChunkTask]]:
    """The copy tasks of ``table`` as a snapshot call plans them (files never committed)."""
    config = config_for(pg, db, base / f"{run}-{table}", [table], chunk_size)
    oids = [t.oid for t in followed_tables(config.source_dsn) if t.name == table]
    with export_snapshot(config.source_dsn, oids) as held:
        _, tasks, _ = _plan(open_catalog(config), config, held, held.tables([table]), run)
        yield tasks


def peak_rss(pg: LocalPostgres, db: str, base: Path, table: str) -> None:
    """The executor's peak RSS copying a quarter of ``table`` and all of it, each as ONE
    chunk in a forked process of its own: streaming keeps it flat."""
    blocks = pg.sql(f"SELECT pg_relation_size('{table}') / 8192", db)[0][0]
    for label, size in (("a quarter of", max(1, blocks // 4)), ("all of", blocks + 1)):
        with chunk_tasks(pg, db, base, table, size * 8192, f"rss{size}") as tasks:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: copy the first chunk, nothing else
                try:
                    copy_chunk(tasks[0])
                    os.write(write, str(pa.default_memory_pool().max_memory()).encode())
                finally:
                    os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                arrow_peak = int(pipe.read() or 0)
            _, status, usage = os.wait4(pid, 0)
            if status:
                raise SystemExit(f"the copy of {table} failed in the child ({status})")
            rows = pg.sql(f"SELECT count(*) FROM {table} WHERE ctid < '({size},0)'::tid",
                          db)[0][0]
            print(f"peak RSS copying {label} {table} ({rows:,} rows, one chunk): "
                  f"{usage.ru_maxrss / 1024:,.0f} MiB (Arrow's memory pool at most "
                  f"{arrow_peak / 2**20:,.0f} MiB)")


def profile(pg: LocalPostgres, db: str, base: Path, table: str, chunk_size: int) -> None:
    """Each chunk of ``table`` copied by copy_chunk in this process (the executor's work,
    without Spark), under cProfile; the files are written, never committed."""
    with chunk_tasks(pg, db, base, table, chunk_size, "prof") as tasks:
        plain, results = best(1, lambda: [copy_chunk(t) for t in tasks])
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.runcall(lambda: [copy_chunk(t) for t in tasks])
        profiled = time.perf_counter() - t0
    rows = sum(r.rows for r in results)
    print(f"\n### {table}: copy_chunk in this process, {len(tasks)} chunk(s) one after the "
          f"other, {rows:,} rows: {rows / plain:,.0f} rows/s on one core ({plain:.2f} s; "
          f"{profiled:.2f} s under cProfile)")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(20)
    stats.sort_stats("cumulative").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, default=15, choices=(15, 18))
    ap.add_argument("--rows", type=int, default=4_000_000, help="rows in each table")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    ap.add_argument("--chunk-size", default=str(Config().snapshot_chunk_size),
                    help="CDCLAKE_SNAPSHOT_CHUNK_SIZE (bytes of heap per copy task; 256MB "
                         "by default)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile each table's chunks copied in this process")
    args = ap.parse_args()
    chunk_size = parse_size(args.chunk_size)
    base = Path(tempfile.mkdtemp(prefix="cdclake-bench-"))
    base.chmod(0o755)  # the server runs as postgres and must reach its data directory
    pg = LocalPostgres.create(args.version, base / "pg").start()
    spark = None
    try:
        db = pg.create_database("bench")
        t0 = time.perf_counter()
        load(pg, db, args.rows)
        install(pg.dsn(db))
        sizes = pg.sql("SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)) FROM pg_class c "
                       "WHERE c.relname IN ('accounts', 'wide') ORDER BY 1", db)
        print(f"PostgreSQL {args.version}, {args.rows:,} rows per table "
              f"({', '.join(f'{n} {s}' for n, s in sizes)}), loaded in "
              f"{time.perf_counter() - t0:.1f} s; chunk size {chunk_size:,} bytes; best of "
              f"{args.repeat}")
        t0 = time.perf_counter()
        spark = session(config_for(pg, db, base / "unused", TABLES, chunk_size), "bench")
        spark.sparkContext.parallelize([0], 1).count()  # the JVM and a Python worker are up
        print(f"Spark local[2] start-up: {time.perf_counter() - t0:.1f} s (not in the times "
              "below)")
        print("| tables | rows | chunks | COPY rows/s | snapshot rows/s | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        for tables in [[t] for t in TABLES] + [list(TABLES)]:
            row, _ = measure(pg, db, base, spark, tables, chunk_size, args.repeat)
            print(row.line(), flush=True)
        fixed, _ = best(args.repeat, lambda: snapshot(pg, db, base, spark, [EMPTY], chunk_size))
        print(f"\nA snapshot call of an empty table (one chunk, no row): {fixed:.2f} s")
        for table in TABLES:
            peak_rss(pg, db, base, table)
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(snapshot, pg, db, base, spark, [EMPTY], chunk_size)
            print(f"\n### the driver's side of a snapshot call of {EMPTY} (the Spark job "
                  "runs in a thread of its own: here it shows as waiting)")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
            for table in TABLES:
                profile(pg, db, base, table, chunk_size)
    finally:
        if spark is not None:
            spark.stop()
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
