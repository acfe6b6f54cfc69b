"""`cdclake run` on the stream path at two sizes, beside PostgreSQL's decoder and `cdclake
decode --jobs 2` on the same WAL: throughput, per-step seconds, peak RSS.

For each pgbench scale a fresh PostgreSQL 15 gets pgbench's tables and a 20-column table,
empty, then `cdclake source install` and a `test_decoding` slot; a first `cdclake run` takes
the initial snapshot (of empty tables). Then the workload: `pgbench -i -I g` (the tables
filled client-side: a TRUNCATE and a COPY), 10,000 wide rows per scale inserted and a tenth
of them updated, `pgbench -t 7500*scale -c 2` (the issue's 150,000 at scale 20). One process
then runs the pipeline as `cdclake run` does (`steps.run_once`: ship, decode, validate the
stream, merge, validate the mirrors; the stream carries every row) on `local[2]` with
``spark.driver.memory=1g, spark.driver.maxResultSize=64m``, batches bounded as the
configuration bounds them (``max_batch_segments``, ``max_batch_bytes``: what a user gets) or
by ``--batch-segments`` (16: many small batches, each paying a batch's fixed costs), the
merge engine of ``--merge-engine`` (default: the configuration's).

Reported per size: changes, batches, seconds in all and per step, changes/s end to end; the
same WAL decoded by the slot (``pg_logical_slot_peek_changes``, PostgreSQL's decoder, one
core) and by `cdclake decode --jobs 2` (test_decoding text), their changes/s and the ratios
of end to end to each; the peak RSS of the Python driver, Spark's JVMs and the largest Python
worker (each process's own high-water mark, ``VmHWM``, sampled over the process tree); the
machine's idle CPU per step (core-seconds: what overlapping steps could still use). No
peak may grow with the size. The mirrors are compared with the source through DuckDB (row
count and column sums per table), with each mirror's data files, delete files and snapshots.
bench/merge.py compares the two merge engines on one update.

    .venv/bin/python bench/scale.py [--scales 5 20 ...] [--batch-segments N]
        [--driver-memory 1g] [--merge-engine pyiceberg|spark]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from cdclake.catalog.install import install
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.duck

DRIVER = "spark.driver.memory={memory},spark.driver.maxResultSize=64m"

RUN = """
import json, os, time
from pathlib import Path
from cdclake.config import Config
from cdclake.pipeline import steps
seconds, driver, mark = {}, {}, [time.monotonic()]
def idle_seconds():  # the machine's idle CPU time so far, all cores (/proc/stat: USER_HZ)
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")
idle, idle_mark = {}, [idle_seconds()]
def on_step(name, result):
    now = time.monotonic()
    seconds[name], mark[0] = now - mark[0], now
    now_idle = idle_seconds()
    idle[name], idle_mark[0] = now_idle - idle_mark[0], now_idle
    # this process's peak during the step, then the peak reset (clear_refs 5)
    status = Path("/proc/self/status").read_text()
    driver[name] = int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1])
    Path("/proc/self/clear_refs").write_text("5")
out = steps.run_once(Config.load(), run_id="bench", on_step=on_step)["steps"]
print(json.dumps({"seconds": seconds, "driver": driver, "idle": idle,
                  "batches": len(out["decode"].get("batches", [])),
                  "tables": out["decode"].get("tables", {}),
                  "decode": {k[3:]: v / 1000 for k, v in out["decode"].get("stats", {}).items()
                             if k.startswith("ms_")},
                  "engines": sorted({(t["engine"], t["fallback"])
                                     for b in out["merge"]["batches"] for t in b["tables"]})}))
"""
#: per pgbench table, the aggregates compared between the source and its mirror
CHECKS = {"pgbench_accounts": "count(*), sum(aid), sum(abalance)",
          "pgbench_branches": "count(*), sum(bbalance)",
          "pgbench_tellers": "count(*), sum(tbalance)",
          "pgbench_history": "count(*), sum(id), sum(delta)",
          "wide": "count(*), sum(id), sum(n), sum(length(c1) + length(c10) + length(c20))"}
#: a 20-column table of 10,000 rows per scale (200k at scale 20), a tenth of it updated
WIDE_TABLE = ("CREATE TABLE wide (id int PRIMARY KEY, n int, "
              + ", ".join(f"c{i} text" for i in range(1, 21)) + ")")
WIDE = ["INSERT INTO wide SELECT g, 0, "
        + ", ".join(f"md5((g * {i})::text)" for i in range(1, 21))
        + " FROM generate_series(1, {rows}) g",
        "UPDATE wide SET n = n + 1, c10 = upper(c10) WHERE id % 10 = 0"]


def pgbench(pg: LocalPostgres, db: str, *args: str) -> None:
    subprocess.run([pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U",
                    "postgres", *args, db], check=True, capture_output=True)


def empty_tables(pg: LocalPostgres, db: str, scale: int) -> None:
    """pgbench's tables (with their keys) and the wide one, empty, as at the install."""
    pgbench(pg, db, "-i", "-I", "dtp", "-s", str(scale))
    pg.sql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY", db)
    pg.sql(WIDE_TABLE, db)


def workload(pg: LocalPostgres, db: str, scale: int) -> None:
    pgbench(pg, db, "-i", "-I", "g", "-q", "-s", str(scale))
    for sql in WIDE:
        pg.sql(sql.replace("{rows}", str(10_000 * scale)), db)
    pgbench(pg, db, "-c", "2", "-j", "2", "-t", str(7500 * scale), "-n")


def wait_archived(pg: LocalPostgres, timeout: float = 600) -> None:
    ready = pg.data_dir / "pg_wal" / "archive_status"
    deadline = time.monotonic() + timeout
    while list(ready.glob("*.ready")):
        if time.monotonic() > deadline:
            raise TimeoutError("WAL was not archived in time")
        time.sleep(0.2)


class Peak(threading.Thread):
    """The largest ``VmHWM`` per kind of process in the tree under ``root`` while it runs:
    the Python driver (``root``), Spark's JVM, the Python workers."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.kib = {"driver": 0, "jvm": 0, "worker": 0}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.2):
            for pid in _tree(self.root):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                kib = int(fields.get("VmHWM", "0 kB").split()[0])
                name = fields.get("Name", "").strip()
                kind = "driver" if pid == self.root else "jvm" if name == "java" else "worker"
                self.kib[kind] = max(self.kib[kind], kib)

    def stop(self) -> None:
        self._done.set()
        self.join()


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def run_child(code: str, env: dict[str, str], what: str) -> tuple[float, dict[str, int], str]:
    """Run ``code`` in a process of its own: seconds, peak KiB per kind of process, stdout."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=err)
        peak = Peak(child.pid)
        peak.start()
        out = child.stdout.read() if child.stdout else ""
        status = child.wait()
        seconds = time.monotonic() - started
        peak.stop()
        if status:
            err.seek(0)
            tail = "".join(err.readlines()[-20:])
            raise SystemExit(f"{what} failed (status {status}); its last lines:\n{tail}")
    return seconds, peak.kib, out


def mirrors_match(pg: LocalPostgres, db: str, env: dict[str, str]) -> bool:
    """Every table's aggregates, the source's against its mirror's through DuckDB; prints
    each mirror's data files, delete files and snapshots."""
    from tests.support import duck

    from cdclake.config import Config
    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.tables import mirror_identifier

    config = Config.load(env=env)
    catalog = open_catalog(config)
    con = duck.connect()
    try:
        for table, aggregates in CHECKS.items():
            mirror = catalog.load_table(mirror_identifier(config, "public", table))
            content = mirror.inspect.files().column("content").to_pylist()
            print(f"    {table}: {content.count(0)} data files, {content.count(1)} position-"
                  f"delete files, {len(mirror.snapshots())} snapshots", flush=True)
            location = mirror.metadata_location.removeprefix("file://")
            lake = con.execute(f"SELECT {aggregates} FROM iceberg_scan(?)",
                               [location]).fetchone()
            source = pg.sql(f"SELECT {aggregates} FROM {table}", db)[0]
            if tuple(int(v or 0) for v in lake or ()) != tuple(int(v or 0) for v in source):
                print(f"{table}: mirror {lake} != source {source}", file=sys.stderr)
                return False
    finally:
        con.close()
    return True


def measure(scale: int, batch_segments: int | None, spark_conf: str,
            engine: str | None) -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="cdclake-scale-"))
    base.chmod(0o755)  # the server runs as postgres and must reach its data directory
    pg = LocalPostgres.create(15, base / "pg").start()
    try:
        db = pg.create_database("bench")
        empty_tables(pg, db, scale)
        read_from = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        install(pg.dsn(db))
        start = parse_lsn(pg.sql("SELECT lsn::text FROM pg_create_logical_replication_slot("
                                 "'bench', 'test_decoding')", db)[0][0])
        home = base / "home"
        env = {**os.environ, "CDCLAKE_HOME": str(home),
               "CDCLAKE_STORE_URL": (home / "store").as_uri(),
               "CDCLAKE_ARCHIVE_DIR": str(pg.archive_dir), "CDCLAKE_SOURCE_DSN": pg.dsn(db),
               "CDCLAKE_SPARK_MASTER": "local[2]", "CDCLAKE_SPARK_CONF": spark_conf,
               "CDCLAKE_SPILL_DIR": str(base / "spill")}
        if batch_segments:
            env["CDCLAKE_MAX_BATCH_SEGMENTS"] = str(batch_segments)
        if engine:
            env["CDCLAKE_MERGE_ENGINE"] = engine
        pg.sql("SELECT pg_switch_wal()", db)
        wait_archived(pg)
        run_child(RUN, env, "the first cdclake run (the snapshot of the empty tables)")
        workload(pg, db, scale)
        end = parse_lsn(pg.sql("SELECT pg_switch_wal()::text", db)[0][0])
        wait_archived(pg)
        seconds, peak, out = run_child(RUN, env, f"cdclake run at scale {scale}")
        result = json.loads(out.strip().splitlines()[-1])
        changes = sum(result["tables"].values())
        segments = len(list(Path(pg.archive_dir).glob("0000000*")))
        decoders = decode_rates(pg, db, base, read_from, start, end)
        return {"scale": scale, "changes": changes, "segments": segments,
                "batches": result["batches"], "seconds": seconds, "rate": changes / seconds,
                "steps": result["seconds"], "step_driver": result["driver"],
                "idle": result["idle"], **decoders,
                **{kind: kib / 1024 for kind, kib in peak.items()},
                "engines": result["engines"], "decode": result["decode"],
                "exact": mirrors_match(pg, db, env)}
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)  # the store, spill and mirrors: GBs


def decode_rates(pg: LocalPostgres, db: str, base: Path, read_from: int, start: int,
                 end: int) -> dict[str, float]:
    """Changes/s of PostgreSQL's decoder (the slot made at the install, peeked: one core)
    and of `cdclake decode --jobs 2` on the same WAL, as test_decoding text; each output's
    changes must be as many."""
    from decode import _Sink, peek_slot, timed

    from cdclake.catalog.dictionary import Dictionary
    from cdclake.catalog.signing import fetch_key
    from cdclake.decoding.parallel import decode_lines
    from cdclake.decoding.plugins.test_decoding import TestDecoding
    from cdclake.decoding.session import DecodeOptions
    from cdclake.wal.source import DirectorySource

    with pg.connect(db) as conn:
        key = fetch_key(conn)
    db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = 'bench'", db)[0][0]
    options = DecodeOptions(db_oid=db_oid, start_lsn=start, read_from=read_from, end_lsn=end,
                            spill_dir=base / "spill-decode", ddl_key=key)

    def ours() -> str:
        sink = _Sink()
        decode_lines(DirectorySource(pg.archive_dir), Dictionary(), options,
                     lambda d, v, write: TestDecoding(write, d.types, version=v),
                     sink, jobs=2)  # type: ignore[arg-type]
        return sink.h.hexdigest()

    pg_seconds, (_lines, changes, expected) = timed(  # type: ignore[misc]
        lambda: peek_slot(pg, db))
    ours_seconds, digest = timed(ours)
    if digest != expected:
        raise SystemExit("decode --jobs 2 and the slot differ on the same WAL")
    return {"pg_rate": changes / pg_seconds, "jobs_rate": changes / ours_seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[5, 20],
                    help="pgbench scales, smallest first: growth is the last over the first")
    ap.add_argument("--batch-segments", type=int,
                    help="segments per batch at most (default: the configuration's bounds)")
    ap.add_argument("--driver-memory", default="1g",
                    help="spark.driver.memory: the JVM's heap, which a local[2] JVM grows into")
    ap.add_argument("--merge-engine", choices=("pyiceberg", "spark"),
                    help="default: the configuration's (CDCLAKE_MERGE_ENGINE, else pyiceberg)")
    args = ap.parse_args()
    spark_conf = DRIVER.format(memory=args.driver_memory)
    print(f"cdclake run (ship, decode, validate stream, merge, validate mirrors), local[2], "
          f"{spark_conf}, batches "
          f"{f'of {args.batch_segments} segments' if args.batch_segments else 'as configured'}"
          ", merge engine "
          f"{args.merge_engine or 'the default'}")
    print("| pgbench scale | changes | WAL segments | batches | run s | changes/s end to end "
          "| PostgreSQL's decoder changes/s | decode --jobs 2 changes/s "
          "| end to end / PostgreSQL / --jobs 2 "
          "| s per step (the rest: the process's start, Spark's, the run report) "
          "| driver peak RSS per step: decode / validate stream / merge / validate mirrors (MiB) "
          "| peak RSS driver / JVM / largest Python worker (MiB) | mirrors == source |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|")
    rows = [measure(scale, args.batch_segments, spark_conf, args.merge_engine)
            for scale in args.scales]
    for r in rows:
        names = ("decode", "validate_stream", "merge", "validate_tables")
        steps: dict[str, float] = r["steps"]  # type: ignore[assignment]
        per_step = ", ".join(f"{k} {v:.0f}" for k, v in steps.items() if v >= 0.5)
        per_step += f", rest {r['seconds'] - sum(steps.values()):.0f}"  # type: ignore[operator]
        step_rss = " / ".join(f"{r['step_driver'].get(k, 0) / 1024:,.0f}"  # type: ignore[union-attr]
                              for k in names)
        ratios = (f"{r['rate'] / r['pg_rate']:.2f} / "  # type: ignore[operator]
                  f"{r['rate'] / r['jobs_rate']:.2f}")  # type: ignore[operator]
        print(f"| {r['scale']} | {r['changes']:,} | {r['segments']} | {r['batches']} | "
              f"{r['seconds']:.0f} | {r['rate']:,.0f} | {r['pg_rate']:,.0f} | "
              f"{r['jobs_rate']:,.0f} | {ratios} | {per_step} | {step_rss} | "
              f"{r['driver']:,.0f} / "
              f"{r['jvm']:,.0f} / {r['worker']:,.0f} | {r['exact']} |", flush=True)
    for r in rows:
        print(f"scale {r['scale']}: merge engines (engine, why not spark): {r['engines']}")
        print(f"scale {r['scale']}: idle CPU per step, core-seconds (of {os.cpu_count()} cores): "
              + ", ".join(f"{k} {v:.1f}" for k, v in r["idle"].items()))  # type: ignore[union-attr]
        print(f"scale {r['scale']}: decode stages, s summed over batches: "
              + ", ".join(f"{k} {v:.1f}" for k, v in r["decode"].items()))  # type: ignore[union-attr]
    small, large = rows[0], rows[-1]
    growth = {k: large[k] / small[k] for k in ("driver", "jvm", "worker")}  # type: ignore[operator]
    print(f"changes x{large['changes'] / small['changes']:.1f} "  # type: ignore[operator]
          "-> peak RSS " + ", ".join(f"{k} x{v:.2f}" for k, v in growth.items()))


if __name__ == "__main__":
    main()
