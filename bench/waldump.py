"""Benchmark cdclake's WAL reader against pg_waldump on the same segments.

Why: the reader is stage 1 of every decode (and of every Spark task), so its records/s bound
the whole pipeline. This measures, on realistic WAL (pgbench: COPY load, index build, then
TPC-B-like transactions with full-page images after checkpoints):

* ``reader``: iterate all records (assembly across pages/segments + CRC-32C + block headers);
* ``reader+json``: the same plus ``cdclake waldump --json`` formatting of every record;
* ``reader+text``: the same plus pg_waldump-style text lines;
* ``pg_waldump``: PostgreSQL's own tool over the same files, output to /dev/null.

    .venv/bin/python bench/waldump.py                     # generate ~64 MB with pgbench (PG15)
    .venv/bin/python bench/waldump.py --mb 100 --segment-mb 1
    .venv/bin/python bench/waldump.py --wal DIR           # benchmark existing segments
    .venv/bin/python bench/waldump.py --profile           # cProfile of the reader loop
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import is_segment_name
from cdclake.wal.reader import XLogReader
from cdclake.wal.source import DirectorySource
from cdclake.waldump import record_json_line, record_text


def generate(version: int, target_mb: int, segment_mb: int, dest: Path) -> Path:
    """Run pgbench on a throw-away cluster until ``target_mb`` of WAL; copy complete segments."""
    pg = LocalPostgres.create(version, wal_segsize_mb=segment_mb).start()
    try:
        start = pg.sql("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")[0][0]
        bench = [pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]
        env = {**os.environ, "PGUSER": "postgres"}
        subprocess.run([*bench, "-i", "-q", "-s", "2", "postgres"], check=True, env=env,
                       capture_output=True)
        while True:
            written = pg.sql("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")[0][0] - start
            if written >= target_mb << 20:
                break
            pg.sql("CHECKPOINT")  # full-page images again, as in production
            subprocess.run([*bench, "-n", "-c", "4", "-j", "2", "-t", "2000", "postgres"],
                           check=True, env=env, capture_output=True)
        last = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0]
        pg.sql("SELECT pg_switch_wal()")
        deadline = time.monotonic() + 120
        while not (pg.archive_dir / last).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"segment {last} was not archived in time")
            time.sleep(0.1)
        dest.mkdir(parents=True, exist_ok=True)
        for f in sorted(pg.archive_dir.iterdir()):
            if is_segment_name(f.name) and f.name <= last:
                shutil.copyfile(f, dest / f.name)
    finally:
        pg.destroy()
    return dest


def time_reader(wal: Path, fmt: Callable[..., str] | None) -> tuple[int, float]:
    """(records, seconds) for one pass of our reader, optionally formatting every record."""
    t0 = time.perf_counter()
    reader = XLogReader(DirectorySource(wal))
    n = 0
    if fmt is None:
        for _ in reader:
            n += 1
    else:
        with open(os.devnull, "w") as out:
            for rec in reader:
                out.write(fmt(rec, reader.version) + "\n")
                n += 1
    return n, time.perf_counter() - t0


def time_pg_waldump(tool: str, wal: Path) -> tuple[int, float]:
    """(records, seconds) for pg_waldump over the same segments, its output to /dev/null."""
    segs = sorted(f for f in wal.iterdir() if is_segment_name(f.name))
    t0 = time.perf_counter()
    with open(os.devnull, "w") as out:
        subprocess.run([tool, str(segs[0]), str(segs[-1])], stdout=out,
                       stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - t0
    stats = subprocess.run([tool, "--stats", str(segs[0]), str(segs[-1])], capture_output=True,
                           text=True, check=False).stdout
    n = next(int(line.split()[1]) for line in stats.splitlines() if line.startswith("Total"))
    return n, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="Numbers are best of --repeat runs.")
    parser.add_argument("--wal", type=Path, help="existing directory of segments to read "
                                                  "(default: generate with pgbench)")
    parser.add_argument("--version", type=int, default=15, choices=(15, 18),
                        help="PostgreSQL version to generate WAL with / whose pg_waldump runs")
    parser.add_argument("--mb", type=int, default=64, help="WAL to generate, MB (default 64)")
    parser.add_argument("--segment-mb", type=int, default=16,
                        help="segment size of the generated WAL, MB (default 16)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement")
    parser.add_argument("--keep", action="store_true", help="keep the generated WAL directory")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the plain reader loop")
    args = parser.parse_args(argv)

    tmp = None
    wal = args.wal
    if wal is None:
        tmp = Path(tempfile.mkdtemp(prefix="cdclake-bench-wal-"))
        print(f"generating ~{args.mb} MB of pgbench WAL on PostgreSQL {args.version} ...",
              flush=True)
        wal = generate(args.version, args.mb, args.segment_mb, tmp / "wal")
    try:
        segs = [f for f in wal.iterdir() if is_segment_name(f.name.removesuffix(".zst"))]
        total = sum(f.stat().st_size for f in segs)
        print(f"WAL: {wal} ({len(segs)} segments, {total / 2**20:.0f} MB)")
        tool = str(LocalPostgres(args.version, Path("/nonexistent")).tool("pg_waldump"))
        results: dict[str, tuple[int, float]] = {}
        runs: dict[str, Callable[[], tuple[int, float]]] = {
            "reader": lambda: time_reader(wal, None),
            "reader+json": lambda: time_reader(wal, record_json_line),
            "reader+text": lambda: time_reader(wal, record_text),
            "pg_waldump": lambda: time_pg_waldump(tool, wal),
        }
        for name, fn in runs.items():
            best = min((fn() for _ in range(args.repeat)), key=lambda r: r[1])
            results[name] = best
            n, secs = best
            print(f"{name:<12} {n:>10} records {secs:8.2f} s {n / secs:12,.0f} records/s "
                  f"{total / 2**20 / secs:8.1f} MB/s", flush=True)
        pg_rate = results["pg_waldump"][0] / results["pg_waldump"][1]
        for name in ("reader", "reader+json", "reader+text"):
            n, secs = results[name]
            print(f"pg_waldump / {name}: {pg_rate / (n / secs):.1f}x")
        if results["reader"][0] != results["pg_waldump"][0]:
            print(f"warning: record counts differ ({results['reader'][0]} vs "
                  f"{results['pg_waldump'][0]})", file=sys.stderr)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            time_reader(wal, None)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    finally:
        if tmp is not None:
            if args.keep:
                print(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
