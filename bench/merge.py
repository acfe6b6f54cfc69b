"""One merge touching 1% of a large mirror: the pyiceberg merge against the Spark merge.

A fresh PostgreSQL 15 gets ``pgbench -i -s N`` (N x 100,000 rows in ``pgbench_accounts``, the
filler made 64 characters of hex so the rows have a width in Parquet too); two cdclake homes
each copy it in an initial snapshot (ship, snapshot, decode, validate, merge), so both start
from the same mirror. Then 1% of the rows are updated (``aid % 100 = 0``, spread over every data
file), archived, decoded and validated in each home, and each home's merge step runs in its own
process: one
with ``CDCLAKE_MERGE_ENGINE=pyiceberg`` (copy-on-write: every data file holding a touched row
is rewritten), one with ``spark`` (MERGE INTO, merge-on-read: position deletes plus the new
rows). Reported per engine, from the snapshots the merge committed and the warehouse: files
added and removed, bytes written, the table's size before, the merge's seconds and the bytes
its process tree read (``rchar``: every read, the JVM's jars included). Both mirrors are then
compared with the source through DuckDB.

    .venv/bin/python bench/merge.py [--scale 20]
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
from collections import Counter
from pathlib import Path
from typing import Any

from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import LocalPostgres

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO)]
from scale import _tree, wait_archived  # noqa: E402

TABLE = "public.pgbench_accounts"
PREPARE = """
from cdclake.config import Config
from cdclake.pipeline import steps
config = Config.load()
for step in (steps.ship, steps.snapshot, steps.decode, steps.validate_stream, steps.merge):
    step(config)
"""
DECODE = """
from cdclake.config import Config
from cdclake.pipeline import steps
config = Config.load()
steps.ship(config)
steps.decode(config)
steps.validate_stream(config)  # the merge takes validated batches only
"""
MERGE = """
import json
from cdclake.config import Config
from cdclake.pipeline import steps
print(json.dumps(steps.merge(Config.load())))
"""


class Reads(threading.Thread):
    """The bytes every process of the tree under ``root`` read (``rchar``), summed over the
    processes, each at its last sample."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.rchar: dict[int, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.1):
            for pid in _tree(self.root):
                try:
                    io = Path(f"/proc/{pid}/io").read_text()
                except OSError:
                    continue
                fields = dict(line.split(": ") for line in io.splitlines())
                self.rchar[pid] = int(fields["rchar"])

    def stop(self) -> int:
        self._done.set()
        self.join()
        return sum(self.rchar.values())


def child(code: str, env: dict[str, str]) -> tuple[str, float, int]:
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reads = Reads(proc.pid)
    reads.start()
    out, err = proc.communicate()
    seconds = time.monotonic() - started
    total = reads.stop()
    if proc.returncode:
        raise SystemExit(f"step failed ({proc.returncode}):\n{err[-3000:]}")
    return out, seconds, total


def files_under(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _mirror(env: dict[str, str]) -> Any:
    config = Config.load(env=env)
    return open_catalog(config).load_table(mirror_identifier(config, *TABLE.split(".")))


def measure(env: dict[str, str], home: Path) -> dict[str, Any]:
    """Run the merge step; what it did, summed over the snapshots it committed."""
    before = files_under(home / "warehouse")
    old = {s.snapshot_id for s in _mirror(env).snapshots()}
    data_bytes = int(_mirror(env).current_snapshot().summary.additional_properties.get(
        "total-files-size", 0))
    out, seconds, read = child(MERGE, env)
    after = files_under(home / "warehouse")
    table = _mirror(env)
    new = [s.summary.additional_properties for s in table.snapshots()
           if s.snapshot_id not in old and s.summary is not None]

    def total(key: str) -> int:
        return sum(int(summary.get(key, 0)) for summary in new)

    final = table.current_snapshot().summary.additional_properties
    merged = json.loads(out.strip().splitlines()[-1])
    report = next(t for b in merged["batches"] for t in b["tables"] if t["table"] == TABLE)
    return {"engine": report["engine"], "fallback": report["fallback"],
            "changes": report["changes"], "seconds": seconds, "read": read,
            "snapshots": len(new), "table_bytes": data_bytes,
            "written": sum(size for p, size in after.items() if p not in before),
            "added_data": total("added-data-files"), "removed_data": total("deleted-data-files"),
            "removed_bytes": total("removed-files-size"),
            "added_deletes": total("added-position-delete-files"),
            "rows": int(final.get("total-records", 0))
            - int(final.get("total-position-deletes", 0))}


def mirror_matches_source(pg: LocalPostgres, db: str, env: dict[str, str]) -> bool:
    from tests.support import duck

    config = Config.load(env=env)
    table = open_catalog(config).load_table(mirror_identifier(config, *TABLE.split(".")))
    mirror = Counter((r["aid"], r["abalance"]) for r in duck.rows(table, ["aid", "abalance"]))
    source = Counter(tuple(r) for r in pg.sql("SELECT aid, abalance FROM pgbench_accounts", db))
    return mirror == source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=20)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cdclake-merge-"))
    base.chmod(0o755)  # the server runs as postgres and must reach its data directory
    pg = LocalPostgres.create(15, base / "pg").start()
    try:
        db = pg.create_database("bench")
        cmd = [pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]
        subprocess.run([*cmd, "-i", "-q", "-s", str(args.scale), db], check=True,
                       capture_output=True)
        # pgbench's filler is blank (Parquet shrinks it to nothing): give rows a real width
        pg.sql("UPDATE pgbench_accounts SET filler = md5(aid::text) || md5((-aid)::text)", db)
        pg.sql("VACUUM FULL pgbench_accounts", db)
        # the data is there before the stream (the snapshot copies it): its WAL is not needed
        pg.sql("SELECT pg_switch_wal()", db)
        wait_archived(pg)
        for segment in Path(pg.archive_dir).iterdir():
            segment.unlink()
        install(pg.dsn(db))
        pg.sql("SELECT pg_switch_wal()", db)
        wait_archived(pg)
        envs = {}
        for engine in ("pyiceberg", "spark"):
            home = base / engine
            envs[engine] = {**os.environ, "CDCLAKE_HOME": str(home),
                            "CDCLAKE_STORE_URL": (home / "store").as_uri(),
                            "CDCLAKE_ARCHIVE_DIR": str(pg.archive_dir),
                            "CDCLAKE_SOURCE_DSN": pg.dsn(db), "CDCLAKE_SPARK_MASTER": "local[2]",
                            "CDCLAKE_TABLES": TABLE, "CDCLAKE_MERGE_ENGINE": engine,
                            "PYTHONPATH": str(REPO)}
            child(PREPARE, envs[engine])
        pg.sql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 100 = 0", db)
        pg.sql("SELECT pg_switch_wal()", db)
        wait_archived(pg)
        rows = []
        for engine, env in envs.items():
            child(DECODE, env)
            r = measure(env, base / engine)
            r["exact"] = mirror_matches_source(pg, db, env)
            rows.append(r)
        print(f"merge of a 1% update, pgbench scale {args.scale}, local[2]")
        print("| engine | changes | table rows | table MiB before | seconds | snapshots "
              "| data files removed (MiB) | data files added | delete files added "
              "| MiB written | MiB read (rchar) | mirror == source |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['engine']} | {r['changes']:,} | {r['rows']:,} "
                  f"| {r['table_bytes'] / 2**20:,.1f} | {r['seconds']:.1f} | {r['snapshots']} "
                  f"| {r['removed_data']} ({r['removed_bytes'] / 2**20:,.1f}) "
                  f"| {r['added_data']} | {r['added_deletes']} "
                  f"| {r['written'] / 2**20:,.1f} | {r['read'] / 2**20:,.0f} | {r['exact']} |")
            if r["fallback"]:
                print(f"  ({r['engine']}: {r['fallback']})")
    finally:
        pg.destroy()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
