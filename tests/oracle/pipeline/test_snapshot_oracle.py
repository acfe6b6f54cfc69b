"""The initial snapshot hands over to the change stream exactly, with no slot.

A database holds data before ``cdclake source install``; then, while writers run (transfers
keeping a sum constant, UPDATEs leaving a TOASTed value unchanged, key changes, rows moving
between partitions, deletes, duplicate rows of a REPLICA IDENTITY FULL table), the first
``cdclake run`` snapshots every table and merges the stream. Spanning the snapshot: a
transaction open across it, a prepared transaction committed after it, and a transaction that
wrote its commit record before the snapshot but was still running in its eyes (its backend
waits for a synchronous standby that does not exist: PostgreSQL leaves the proc array only
after that wait). After a catch-up run, every mirror read by DuckDB equals its source table
row for row; one more run changes nothing.

The first run right after the install, on a database that archived before cdclake came (the
archive holds segments from before the install but not yet the install's own), writers running
before, during and after the install: it takes the snapshot and decodes nothing, reporting that
it waits for the install's segment (no error); the segments wholly before the install's message
belong to no batch. Once that segment is archived the next run decodes from the message on, and
after a catch-up run every mirror equals its source table.
"""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from psycopg.errors import DeadlockDetected, SerializationFailure

from cdclake.archive import Layout, open_store
from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.pipeline import steps
from cdclake.pipeline.status import status
from cdclake.stream.progress import load_progress
from tests.oracle.decoding.harness import archive_all
from tests.oracle.pipeline.harness import (
    WORK_MEM,
    PipelineRun,
    compare_mirrors,
    copy_segments,
    describe,
)
from tests.oracle.tuples.types_catalog import SETUP as TYPE_SETUP
from tests.oracle.tuples.types_catalog import TYPES

pytestmark = pytest.mark.oracle

ACCOUNTS = 300
TOTAL = ACCOUNTS * 1000
#: table sizes are tiny, so chunks are too: every table of more than a page splits
CHUNK = 4 * 8192

BEFORE_INSTALL = [
    "CREATE SCHEMA other",
    "CREATE TABLE acct (id int PRIMARY KEY, owner text, balance int NOT NULL)",
    f"INSERT INTO acct SELECT g, 'owner ' || g, 1000 FROM generate_series(1, {ACCOUNTS}) g",
    "CREATE TABLE doc (id int PRIMARY KEY, n int, body text)",
    "ALTER TABLE doc ALTER body SET STORAGE EXTERNAL",
    # incompressible and TOASTed: an UPDATE of n logs the body as unchanged
    "INSERT INTO doc SELECT g, 0, (SELECT string_agg(md5(g::text || i::text), '') "
    "FROM generate_series(1, 400) i) FROM generate_series(1, 40) g",
    "CREATE TABLE dup (a int, b text)",
    "ALTER TABLE dup REPLICA IDENTITY FULL",
    "INSERT INTO dup SELECT g % 5, 'same' FROM generate_series(1, 50) g",
    "CREATE TABLE nokey (a int, b text)",
    "INSERT INTO nokey SELECT g, 'n' || g FROM generate_series(1, 500) g",
    "CREATE TABLE ev (id int, region text, v int, PRIMARY KEY (id, region)) "
    "PARTITION BY LIST (region)",
    "CREATE TABLE ev_a PARTITION OF ev FOR VALUES IN ('a')",
    "CREATE TABLE ev_b PARTITION OF ev FOR VALUES IN ('b')",
    "INSERT INTO ev SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, g "
    "FROM generate_series(1, 400) g",
    "CREATE TABLE other.items (id bigint PRIMARY KEY, label text)",
    "INSERT INTO other.items SELECT g, 'item ' || g FROM generate_series(1, 2000) g",
    "CREATE TABLE empty_t (id int PRIMARY KEY, v text)",
    "CREATE MATERIALIZED VIEW rich AS SELECT id, balance FROM acct WHERE id % 7 = 0",
]


def _types_table() -> list[str]:
    """A table with a column of every type of the value oracle, a row per literal."""
    cols = [(f"c{i}", typ, literals) for i, (typ, literals) in enumerate(TYPES)]
    rows = max(len(lits) for _, _, lits in cols)
    stmts = [*TYPE_SETUP, "CREATE TABLE typed (id int PRIMARY KEY, "
             + ", ".join(f"{n} {t}" for n, t, _ in cols) + ")"]
    for r in range(rows):
        values = [f"({lits[r]})::{t}" if r < len(lits) else "NULL" for _, t, lits in cols]
        stmts.append(f"INSERT INTO typed VALUES ({r}, {', '.join(values)})")
    return stmts


class Writers:
    """Sessions writing in a loop until stopped; each transaction is small and commits."""

    def __init__(self, pg: LocalPostgres, database: str) -> None:
        self.pg, self.database = pg, database
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.commits = 0
        self.threads = [threading.Thread(target=self._loop, args=(seed,), daemon=True)
                        for seed in range(3)]

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        assert not self.errors, f"a writer failed: {self.errors[0]!r}"

    def _loop(self, seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with self.pg.connect(self.database, autocommit=False) as conn:
                conn.execute("SET synchronous_commit = local")  # never wait for the ghost
                conn.commit()
                n = -1
                while not self.stop.is_set():
                    n += 1
                    try:
                        self._step(conn, rnd, seed, n)
                        conn.commit()
                    except (SerializationFailure, DeadlockDetected):
                        conn.rollback()  # two writers moved one row at once: PostgreSQL's call
                        continue
                    self.commits += 1
                    time.sleep(0.005)
        except BaseException as exc:  # reported by __exit__
            self.errors.append(exc)

    @staticmethod
    def _step(conn: Any, rnd: random.Random, seed: int, n: int) -> None:
        kind = n % 6
        if kind == 0:  # a transfer (accounts found by owner: keys change): the sum stays
            a, b = rnd.sample(range(1, ACCOUNTS + 1), 2)
            amount = rnd.randint(1, 50)
            for acct, delta in sorted([(a, -amount), (b, amount)]):
                conn.execute("UPDATE acct SET balance = balance + %s WHERE owner = %s",
                             (delta, f"owner {acct}"))
        elif kind == 1:  # the TOASTed body stays, unlogged (docs 39, 40: the long ones')
            conn.execute("UPDATE doc SET n = n + 1 WHERE id = %s", (rnd.randint(1, 38),))
        elif kind == 2:  # a key change, keeping the account's balance
            conn.execute("UPDATE acct SET id = id + 100000 WHERE id = (SELECT id FROM acct "
                         "WHERE id <= %s AND id %% 3 = %s ORDER BY random() LIMIT 1)",
                         (ACCOUNTS, seed))
        elif kind == 3:  # a row moves between partitions
            conn.execute("UPDATE ev SET region = CASE region WHEN 'a' THEN 'b' ELSE 'a' END, "
                         "v = v + 1 WHERE id = %s", (rnd.randint(1, 400),))
        elif kind == 4:  # duplicates: one copy goes, two identical ones come
            conn.execute("DELETE FROM dup WHERE ctid = (SELECT ctid FROM dup WHERE a = %s "
                         "LIMIT 1)", (rnd.randint(0, 4),))
            conn.execute("INSERT INTO dup VALUES (%s, 'same'), (%s, 'same')",
                         (rnd.randint(0, 4),) * 2)
        else:  # deletes and inserts
            conn.execute("DELETE FROM other.items WHERE id = %s", (rnd.randint(1, 2000),))
            conn.execute("INSERT INTO other.items VALUES (%s, 'new') ON CONFLICT DO NOTHING",
                         (10_000 + seed * 100_000 + n,))
            conn.execute("INSERT INTO nokey VALUES (%s)", (n,))


def _ghost_commit(pg: LocalPostgres, database: str) -> tuple[threading.Thread, int]:
    """A transaction whose commit record is written but which stays in the proc array: its
    backend waits for a synchronous standby named 'ghost' that never comes."""
    pg.sql("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
    pg.sql("SELECT pg_reload_conf()")
    conn = pg.connect(database, autocommit=False)
    conn.execute("INSERT INTO empty_t VALUES (2, 'ghost')")  # a row no writer touches
    xid = int(conn.execute("SELECT txid_current()").fetchone()[0])
    pid = conn.info.backend_pid
    thread = threading.Thread(target=lambda: (conn.commit(), conn.close()), daemon=True)
    deadline = time.monotonic() + 30
    time.sleep(1)  # the checkpointer must have taken the new setting
    thread.start()
    while time.monotonic() < deadline:
        waiting = pg.sql("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                         database, (pid,))
        if waiting and waiting[0][0] == "SyncRep":
            return thread, xid
        time.sleep(0.05)
    raise AssertionError("the ghost transaction never waited for its synchronous standby")


def _release_ghost(pg: LocalPostgres, thread: threading.Thread) -> None:
    pg.sql("ALTER SYSTEM RESET synchronous_standby_names")
    pg.sql("SELECT pg_reload_conf()")
    thread.join(30)
    assert not thread.is_alive(), "the ghost transaction did not finish"


def _config(pg: LocalPostgres, database: str, tmp_path: Path) -> Config:
    """A stream of ``database`` under ``tmp_path``, its archive directory ``archive``."""
    return Config(home=tmp_path / "home", source_dsn=pg.dsn(database),
                  archive_dir=tmp_path / "archive", store_url=(tmp_path / "store").as_uri(),
                  work_mem=WORK_MEM, spill_dir=tmp_path / "spill", spark_master="local[2]",
                  spark_partitions=2, snapshot_chunk_size=CHUNK)


def test_initial_snapshot_hands_over_exactly(pg: LocalPostgres, database: str, tmp_path: Path,
                                             spark: Any) -> None:
    pg.sql("SELECT pg_switch_wal()", database)
    pg.sql("CHECKPOINT", database)
    first = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())", database)[0][0]
    with pg.connect(database) as conn:
        for sql in BEFORE_INSTALL + _types_table():
            conn.execute(sql)
    report = install(pg.dsn(database))
    # DDL between the install and the snapshot: the copy is typed by the new definition, the
    # stream's older changes by the old one
    pg.sql("ALTER TABLE other.items ADD COLUMN note text DEFAULT 'added'", database)
    pg.sql("ALTER TABLE nokey DROP COLUMN b", database)
    archive = tmp_path / "archive"
    config = _config(pg, database, tmp_path)
    ghost: threading.Thread | None = None
    with pg.connect(database, autocommit=False) as open_txn, \
            pg.connect(database, autocommit=False) as prepared:
        try:
            for c in (open_txn, prepared):
                c.execute("SET synchronous_commit = local")
            # open across the snapshot: writes before it, commits after it
            open_txn.execute("INSERT INTO acct VALUES (5000, 'opened before', 0)")
            open_txn.execute("UPDATE doc SET n = 1000 WHERE id = 40")
            prepared.execute("UPDATE doc SET n = -1 WHERE id = 39")
            prepared.execute("INSERT INTO ev VALUES (1000, 'a', -1)")
            prepared.execute("INSERT INTO empty_t VALUES (1, 'prepared')")
            prepared.execute("PREPARE TRANSACTION 'spans_the_snapshot'")
            prepared.commit()
            with Writers(pg, database) as writers:
                time.sleep(1)
                ghost, ghost_xid = _ghost_commit(pg, database)
                archive_all(pg, database)  # the ghost's commit record is in the first batch
                copy_segments(pg.archive_dir, archive, first)
                run1 = steps.run_once(config, spark=spark)
                time.sleep(0.5)
            _release_ghost(pg, ghost)
            ghost = None
            open_txn.execute("UPDATE acct SET balance = 7 WHERE id = 5000")
            open_txn.commit()
            pg.sql("COMMIT PREPARED 'spans_the_snapshot'", database)
        finally:
            if ghost is not None:
                _release_ghost(pg, ghost)
            for (gid,) in pg.sql("SELECT gid FROM pg_prepared_xacts WHERE database = %s",
                                 database, (database,)):
                pg.sql(f"ROLLBACK PREPARED '{gid}'", database)
    pg.sql("REFRESH MATERIALIZED VIEW rich", database)
    pg.sql("UPDATE doc SET n = n + 1 WHERE id = 2", database)
    archive_all(pg, database)
    copy_segments(pg.archive_dir, archive, first)
    run2 = steps.run_once(config, spark=spark)

    snap = run1["steps"]["snapshot"]
    assert writers.commits > 20, "the writers barely ran: the test proves less"
    assert snap["tables"], "the first run took no snapshot"
    copied = {t["table"]: t for t in snap["tables"]}
    assert {"public.acct", "public.ev_a", "public.ev_b", "other.items", "public.empty_t",
            "public.typed", "public.rich", "public.dup", "public.nokey"} <= set(copied)
    assert copied["public.empty_t"]["rows"] == 0
    assert copied["other.items"]["chunks"] > 1, "no table was split into chunks"
    assert ghost_xid in snap["snapshot"]["xip"], "the ghost was not running in the snapshot"
    assert run1["steps"]["decode"]["start_lsn"] is not None
    assert run2["steps"]["snapshot"]["tables"] == [], "the catch-up run snapshotted again"
    merges = [run1["steps"]["merge"], run2["steps"]["merge"]]
    skipped = sum(t["skipped_snapshot"] for m in merges for b in m["batches"]
                  for t in b["tables"])
    applied = sum(t["inserted"] + t["updated"] + t["deleted"] for m in merges
                  for b in m["batches"] for t in b["tables"])
    assert skipped > 0 and applied > 0, (skipped, applied)

    run = PipelineRun(database, "", report.dictionary_lsn, config, merges=merges)
    diffs, _ = compare_mirrors(pg, run)
    wrong = [d for d in diffs if not d.accepted]
    assert not wrong, describe(wrong)
    total = pg.sql("SELECT sum(balance) FROM acct", database)[0][0]
    assert total == TOTAL + 7, "the writers did not keep the sum (the test is wrong)"

    catalog = open_catalog(config)
    before = {t: catalog.load_table(mirror_identifier(config, *t.split("."))).current_snapshot()
              for t in copied}
    run3 = steps.run_once(config, spark=spark)
    assert run3["steps"]["snapshot"]["tables"] == []
    after = {t: catalog.load_table(mirror_identifier(config, *t.split("."))).current_snapshot()
             for t in copied}
    assert {t: s.snapshot_id if s else None for t, s in after.items()} == \
        {t: s.snapshot_id if s else None for t, s in before.items()}, "a further run changed"


def test_the_first_run_waits_for_the_install_segment(pg: LocalPostgres, database: str,
                                                     tmp_path: Path, spark: Any) -> None:
    """Found by a new user on PostgreSQL 15 and 18: this run used to fail (exit 2, "segments …
    hold no full dictionary")."""
    pg.sql("SELECT pg_switch_wal()", database)
    first = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())", database)[0][0]
    with pg.connect(database) as conn:
        for sql in BEFORE_INSTALL:
            conn.execute(sql)
    archive_all(pg, database)  # the database archived before cdclake came
    archive = tmp_path / "archive"
    config = _config(pg, database, tmp_path)
    with Writers(pg, database) as writers:
        time.sleep(1)
        start, start_segment = pg.sql("SELECT pg_current_wal_insert_lsn()::text, "
                                      "pg_walfile_name(pg_current_wal_insert_lsn())",
                                      database)[0]
        report = install(pg.dsn(database))
        time.sleep(0.5)
        # the segment where the install's message ends: the stream starts there
        wait_for = pg.sql("SELECT pg_walfile_name(%s::pg_lsn)", database,
                          (format_lsn(report.dictionary_lsn),))[0][0]
        # what archive_command has shipped by now: every segment before the install's
        before = []
        for name in copy_segments(pg.archive_dir, archive, first):
            if name[8:] < wait_for[8:]:
                before.append(name)
            else:
                (archive / name).unlink()
        assert before, "no segment was archived before the install: the test proves less"
        run1 = steps.run_once(config, spark=spark)
        checked = status(config)
        archive_all(pg, database)
        copy_segments(pg.archive_dir, archive, first)
        run2 = steps.run_once(config, spark=spark)
        time.sleep(0.5)
    archive_all(pg, database)
    copy_segments(pg.archive_dir, archive, first)
    run3 = steps.run_once(config, spark=spark)

    decode1 = run1["steps"]["decode"]
    assert decode1["batch"] is None
    assert decode1["waiting"].startswith(f"waiting for the install's segment {wait_for}: ")
    skipped = re.search(r"the (\d+) segment\(s\) archived before it", decode1["waiting"])
    # those archived before the install began (the install's own, if the message ends in the
    # next one, is not skipped)
    assert skipped and int(skipped[1]) in (len(before), len(before) - 1), decode1["waiting"]
    assert run1["steps"]["snapshot"]["tables"], "the first run took no snapshot"
    assert checked["decode"] == {"waiting": decode1["waiting"]}  # not stalled

    decode2 = run2["steps"]["decode"]
    # from the install's segment (where the message begins), none before the install
    assert start_segment[8:] <= decode2["segments"][0][8:] <= wait_for[8:], decode2["segments"]
    progress = load_progress(open_store(config), Layout())
    assert progress is not None
    assert parse_lsn(start) <= progress.start_lsn < report.dictionary_lsn
    assert writers.commits > 20, "the writers barely ran: the test proves less"
    merges = [run["steps"]["merge"] for run in (run1, run2, run3)]
    run = PipelineRun(database, "", report.dictionary_lsn, config, merges=merges)
    diffs, _ = compare_mirrors(pg, run)
    wrong = [d for d in diffs if not d.accepted]
    assert not wrong, describe(wrong)
