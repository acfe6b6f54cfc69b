"""The Spark decode job on one core and on two: changes/s with ``local[1]`` and ``local[2]``.

Two workloads (--workload), each on a fresh PostgreSQL 15 whose archive is shipped once to a
local store: "pgbench", `cdclake source install`, `pgbench -i -s N` and pgbench transactions,
where the initial load is one large transaction, which the job splits over the partitions by
stripes of WAL (:mod:`cdclake.spark.routing`); and "transactions", the pgbench transactions
alone (the load archived before the install, and its segments left out), which spread over
the partitions by xid.

In turn in each round, the Spark job (`cdclake.spark.job.decode_batch`, every batch until
nothing is left) decodes the store on ``local[1]`` and on ``local[2]``, in a process of its
own whose Spark session is started before the clock starts (the JVM's start-up is not
decoding). That process decodes copies of the store one after the other: the first ("cold")
pays for the JVM compiling the job's code paths, then --warmup copies are decoded and not
reported, and the last ("warm") is what a long-running Spark application decodes at. The JIT
compiler's threads keep taking CPU, on the core ``local[1]`` leaves free, for several decodes:
about 2.8 CPU-seconds in the first decode of pgbench transactions at scale 2, 1.4 in the
second, 0.5 in the sixth. The shuffle has the same partitions in both. Reported: changes,
seconds and changes/s of each (best of --repeat), and the ratios local[2] / local[1], warm
and cold; all must decode the same changes.

Each run also reports the CPU its process tree used (the driver, the JVM, the Python
workers), in cores: CPU seconds over wall seconds. ``local[1]`` runs one task at a time, but
the JVM moves the shuffle's bytes, collects garbage and compiles beside it, on the other core;
so ``local[1]`` already uses more than one core. For the same CPU work, ``local[2]`` on N
cores cannot be more than N / (the cores ``local[1]`` used) times faster: printed as the
ratio's bound. And the share of the changes its busiest partition decoded (summed over the
batches).

    .venv/bin/python bench/spark_decode.py [--workload pgbench|transactions|both] [--scale N]
        [--repeat N] [--partitions N] [--warmup N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cdclake.catalog.install import install
from cdclake.local.postgres import LocalPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import _pgbench  # bench/decode.py and bench/scale.py, sibling scripts
from scale import wait_archived

#: --workload: what the decoded stream holds
WORKLOADS = {"pgbench": "pgbench's initial load and transactions",
             "transactions": "pgbench transactions alone"}

DECODE = """
import json, os, sys, time
from dataclasses import replace
from cdclake.config import Config
from cdclake.spark.job import decode_batch
from cdclake.sparkenv.session import session
config = Config.load()
spark = session(config, "bench")
spark.sparkContext.parallelize(range(4), 4).count()  # started
sys.path.insert(0, sys.argv[1])
from scale import _tree

def tree_cpu():
    # CPU seconds of this process and its descendants (with the children they reaped)
    ticks = 0
    for pid in _tree(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ticks += sum(map(int, f.read().rsplit(")", 1)[1].split()[11:15]))
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK")

out = {}
# the first copy is "cold"; then warm-up copies, decoded and not reported; the last, "warm"
urls = sys.argv[2:]
for run, url in zip(["cold", *[None] * (len(urls) - 2), "warm"], urls):
    run_config = replace(config, store_url=url)
    changes, busiest, started, cpu = 0, 0, time.monotonic(), tree_cpu()
    while (result := decode_batch(run_config, spark=spark)) is not None:
        changes += result.stats.get("changes", 0)
        busiest += result.stats.get("peak_partition_changes", 0)
    seconds = time.monotonic() - started
    if run is None:
        continue
    out[run] = {"seconds": seconds, "changes": changes, "busiest": busiest,
                "cores": (tree_cpu() - cpu) / seconds}
print(json.dumps(out))
"""


def measure(env: dict[str, str], store: Path, master: str, work: Path, warmup: int
            ) -> dict[str, dict[str, float]]:
    copies = []
    for run in ["cold", *(f"warmup{i}" for i in range(warmup)), "warm"]:
        copy = work / f"store-{master}-{run}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(store, copy)
        copies.append(copy.as_uri())
    run_env = {**env, "CDCLAKE_SPARK_MASTER": master,
               "CDCLAKE_HOME": str(work / f"home-{master}")}
    proc = subprocess.run([sys.executable, "-c", DECODE, str(Path(__file__).resolve().parent),
                           *copies], env=run_env, text=True, capture_output=True, check=False)
    if proc.returncode:
        raise SystemExit(f"decode on {master} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def archive(pg: LocalPostgres, base: Path, workload: str, scale: int) -> Path:
    """The directory of ``pg``'s archive holding ``workload``. For "transactions" the initial
    load is archived before `cdclake source install`, and only the segments after it are
    kept: the stream is the TPC-B transactions alone."""
    db = pg.create_database("bench")
    archived = pg.archive_dir
    if workload == "transactions":
        _pgbench(pg, db, "-i", "-q", "-s", str(scale))
        pg.sql("SELECT pg_switch_wal()", db)
        wait_archived(pg)
        before = {p.name for p in pg.archive_dir.iterdir()}
    install(pg.dsn(db))
    if workload == "pgbench":
        _pgbench(pg, db, "-i", "-q", "-s", str(scale))
    _pgbench(pg, db, "-c", "4", "-j", "2", "-t", str(2500 * scale), "-n")
    pg.sql("SELECT pg_switch_wal()", db)
    wait_archived(pg)
    if workload == "transactions":
        archived = base / "archive"
        archived.mkdir()
        for segment in sorted(pg.archive_dir.iterdir()):
            if segment.name not in before:
                shutil.copy(segment, archived)
    return archived


def run(workload: str, args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="cdclake-sparkdecode-"))
    base.chmod(0o755)  # the server runs as postgres and must reach its data directory
    pg = LocalPostgres.create(15, base / "pg").start()
    try:
        archived = archive(pg, base, workload, args.scale)
        store = base / "store"
        env = {**os.environ, "CDCLAKE_ARCHIVE_DIR": str(archived),
               "CDCLAKE_SOURCE_DSN": pg.dsn("bench"), "CDCLAKE_MAX_BATCH_SEGMENTS": "64",
               "CDCLAKE_SPARK_PARTITIONS": str(args.partitions),
               "CDCLAKE_SPILL_DIR": str(base / "spill")}
        subprocess.run([sys.executable, "-m", "cdclake.cli", "ship"], check=True,
                       env={**env, "CDCLAKE_STORE_URL": store.as_uri(),
                            "CDCLAKE_HOME": str(base / "home")}, capture_output=True)
        best: dict[tuple[str, str], dict[str, float]] = {}
        for _ in range(args.repeat):
            for master in ("local[1]", "local[2]"):
                for run, r in measure(env, store, master, base, args.warmup).items():
                    key = (master, run)
                    if key not in best or r["seconds"] < best[key]["seconds"]:
                        best[key] = r
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)
    print(f"Spark decode job, {WORKLOADS[workload]}, pgbench scale {args.scale}, "
          f"{args.partitions} shuffle partitions, warm after {args.warmup + 1} decodes, "
          f"best of {args.repeat}")
    print("| master | run | changes | seconds | changes/s | CPU cores used | busiest partition |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (master, run), r in sorted(best.items(), key=lambda kv: (kv[0][1] == "cold", kv[0])):
        print(f"| {master} | {run} | {r['changes']:,} | {r['seconds']:.1f} | "
              f"{r['changes'] / r['seconds']:,.0f} | {r['cores']:.2f} | "
              f"{r['busiest'] / max(1, r['changes']):.0%} |")
    same = len({r["changes"] for r in best.values()}) == 1
    cores = len(os.sched_getaffinity(0))
    for run in ("warm", "cold"):
        one, two = best[("local[1]", run)], best[("local[2]", run)]
        print(f"local[2] / local[1], {run}: **{one['seconds'] / two['seconds']:.2f}x** (bound "
              f"on {cores} cores: {cores / one['cores']:.2f}x)")
    print(f"same changes in every run: {'yes' if same else 'NO'}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=2, help="pgbench scale")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    ap.add_argument("--partitions", type=int, default=4, help="shuffle partitions (both runs)")
    ap.add_argument("--workload", choices=[*WORKLOADS, "both"], default="both")
    ap.add_argument("--warmup", type=int, default=3,
                    help="decodes between the cold and the warm one, not reported")
    args = ap.parse_args()
    for workload in WORKLOADS if args.workload == "both" else [args.workload]:
        run(workload, args)

if __name__ == "__main__":
    main()
