"""A 1M-row transaction through `cdclake decode`: spills past --work-mem, matches the slot, and
the reorder buffer's memory stays bounded by work_mem instead of growing with the transaction.

Peak RSS is what each decode process reports for itself (VmHWM in --stats).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from cdclake.catalog.signing import write_key_file
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import format_lsn
from tests.oracle.decoding.harness import Capture, archive_all, prepare

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

ROWS = 1_000_000


def slot_digest(pg: LocalPostgres, cap: Capture) -> tuple[str, int]:
    """sha256 of the slot's lines, streamed through a server-side cursor."""
    h = hashlib.sha256()
    n = 0
    with pg.connect(cap.database, autocommit=False) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        with conn.cursor(name="peek") as cur:
            cur.itersize = 10_000
            cur.execute("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
                        "'include-xids', '1', 'skip-empty-xacts', '1')", (cap.slot,))
            for (line,) in cur:
                h.update(line.encode() + b"\n")
                n += 1
    return h.hexdigest(), n


def decode_measured(pg: LocalPostgres, cap: Capture, work_mem: str, spill: Path,
                    out: Path) -> tuple[str, int]:
    """Run `cdclake decode` with the install's key file and no DSN; its --stats line and its
    own peak RSS in kB (VmHWM)."""
    key = spill.parent / "ddl.key"
    write_key_file(key, cap.key)
    cmd = [sys.executable, "-m", "cdclake.cli", "decode", "--wal", str(pg.archive_dir),
           "--database-oid", str(cap.db_oid), "--start-lsn", format_lsn(cap.start_lsn),
           "--read-from", format_lsn(cap.read_from), "--end-lsn", format_lsn(cap.end_lsn),
           "--work-mem", work_mem, "--spill-dir", str(spill), "--output", str(out), "--stats",
           "--key-file", str(key), "--jobs", "2"]
    proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, int(proc.stderr.rsplit("peak RSS ", 1)[1].split(" kB")[0])


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def spilled_changes(stats: str) -> int:
    return int(stats.split("spilled ", 1)[1].split(" transactions, ", 1)[1].split(" ")[0])


@pytest.fixture(scope="module")
def implementation() -> str:
    """The compiled decoder only, the one users run: a million changes take the pure-Python
    reference some 80 s a server. Its spilling is held to the slot on both servers by
    ``test_matches_slot_when_spilling_everything``, where every transaction spills."""
    return "compiled"


def test_million_row_transaction_spills_and_matches_the_slot(pg: LocalPostgres, database: str,
                                                             tmp_path: Path) -> None:
    pg.sql("CREATE TABLE big (id int PRIMARY KEY, v text, n numeric, ts timestamptz)", database)
    cap = prepare(pg, database)
    try:
        pg.sql("INSERT INTO big SELECT i, md5(i::text), i * 1.5, "
               "'2024-01-01'::timestamptz + i * interval '1 s' "
               f"FROM generate_series(1, {ROWS}) i", database)
        cap.end_lsn = archive_all(pg, database, timeout=300)
        expected, lines = slot_digest(pg, cap)
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    assert lines == ROWS + 2

    spill = tmp_path / "spill"
    out = tmp_path / "out.txt"
    stats_small, rss_small = decode_measured(pg, cap, "64kB", spill, out)
    assert file_digest(out) == expected
    assert "spilled 1 transactions" in stats_small, stats_small
    assert not list(spill.rglob("*.spill")), "spill files must be removed after the commit"

    stats_big, rss_big = decode_measured(pg, cap, "64MB", spill, out)
    assert file_digest(out) == expected
    # 1M rows outgrow 64MB too (the server would spill as well), but far later
    assert spilled_changes(stats_big) < spilled_changes(stats_small)
    print(f"\nPostgreSQL {pg.version}, {ROWS} rows: peak RSS {rss_small // 1024} MiB at "
          f"--work-mem 64kB, {rss_big // 1024} MiB at 64MB")
    assert rss_small < rss_big, (rss_small, rss_big)
    # a million changes held in memory would take about a gigabyte
    assert rss_small < 128 * 1024, f"peak RSS {rss_small} kB at --work-mem 64kB"
