"""The initial snapshot as a user meets it: ``cdclake run`` and ``cdclake snapshot`` run as real
processes against PostgreSQL 15, a local ``file://`` store, the default SQLite catalog and a
local Spark, and every mirror read back with DuckDB.

One source database (``shop``) lives through the module, as a stream does: rows written before
``cdclake source install`` and changes after it; a first ``cdclake run`` SIGKILLed (Spark's JVM
with it) while it copies, and the run after it that removes the dead run's files and copies
every table, printing its progress; a mirror damaged behind cdclake's back and repaired by
``cdclake snapshot --tables`` in one Iceberg commit, with the stream handing over after it; a
stream that starts after the snapshot would be taken; bad input. A second database shows that
``snapshot_mode=never`` copies nothing. The source DSN carries a password that no output may
show.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import Layout, open_store
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import LocalPostgres, free_port
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.stream.progress import load_progress
from tests.support import duck
from tests.support.commands import CDCLAKE, one_error_line

#: the module takes a minute and a half (five Spark start-ups)
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PASSWORD = "Pw-n0t-t0-b3-sh0wn"
ROLE = "cdc_user"
#: 32 heap blocks per copy task: the big table splits into some 18 chunks
CHUNK_SIZE = "256kB"
BIG_ROWS = 25_000
#: the shop's tables and the columns compared (the first is the key)
SHOP = {
    "public.big": ["id", "label", "pad"],
    "public.small": ["id", "label", "n"],
    "other.items": ["id", "label"],
    "public.empty_t": ["id", "v"],
}
BEFORE_INSTALL = [
    "CREATE SCHEMA other",
    "CREATE TABLE big (id bigint PRIMARY KEY, label text, pad text)",
    # ~170 bytes a row: a few MB, copied in a few seconds on local[2]
    f"INSERT INTO big SELECT g, 'big ' || g, repeat(md5(g::text), 4) "
    f"FROM generate_series(1, {BIG_ROWS}) g",
    "CREATE TABLE small (id int PRIMARY KEY, label text, n int)",
    "INSERT INTO small SELECT g, 'small ' || g, 0 FROM generate_series(1, 100) g",
    "CREATE TABLE other.items (id bigint PRIMARY KEY, label text)",
    "INSERT INTO other.items SELECT g, 'item ' || g FROM generate_series(1, 500) g",
    "CREATE TABLE empty_t (id int PRIMARY KEY, v text)",
]
AFTER_INSTALL = [
    "INSERT INTO small SELECT g, 'new ' || g, 1 FROM generate_series(1001, 1005) g",
    "UPDATE small SET n = n + 1, label = 'updated' WHERE id <= 3",
    "DELETE FROM small WHERE id IN (10, 11)",
    "INSERT INTO other.items VALUES (5001, 'after'), (5002, 'after')",
    "UPDATE big SET label = 'changed' WHERE id <= 5",
]
PROGRESS = re.compile(r"^snapshot: ([\d,]+) rows, ([\d,]+) rows/s, (\d+)/(\d+) chunks \((.*)\)$")


# -- the cluster, the source, the CLI -----------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalPostgres]:
    """PG15 with 1 MiB segments, archiving into its own directory (CDCLAKE_ARCHIVE_DIR), and a
    role with a password for the DSN (the server trusts loopback: the password is only there
    to be leaked, or not)."""
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        pg.sql(f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
        yield pg
    finally:
        pg.destroy()


def dsn(pg: LocalPostgres, database: str, port: int | None = None) -> str:
    return (f"host=127.0.0.1 port={port or pg.port} user={ROLE} password={PASSWORD} "
            f"dbname={database}")


def env_for(pg: LocalPostgres, home: Path, source_dsn: str, **extra: str) -> dict[str, str]:
    """What a shell running cdclake would export: this run's CDCLAKE_* settings only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update({"CDCLAKE_HOME": str(home), "CDCLAKE_SOURCE_DSN": source_dsn,
                "CDCLAKE_STORE_URL": (home / "store").as_uri(),
                "CDCLAKE_ARCHIVE_DIR": str(pg.archive_dir), "CDCLAKE_SPARK_MASTER": "local[2]",
                "CDCLAKE_SNAPSHOT_CHUNK_SIZE": CHUNK_SIZE, "CDCLAKE_SNAPSHOT_WAIT": "30",
                **extra})
    return env


def cdclake(env: dict[str, str], *args: str,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the installed ``cdclake`` script; no output of it may show the DSN's password."""
    out = subprocess.run([CDCLAKE, *args], env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert PASSWORD not in out.stdout + out.stderr, f"cdclake {args} showed the password"
    return out


def ok(out: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert out.returncode == 0, f"{out.args} exited {out.returncode}:\n{out.stderr[-4000:]}"
    return out


def archive_all(pg: LocalPostgres, database: str, timeout: float = 60.0) -> None:
    """Close the current segment and wait until the archiver copied it."""
    pg.archive_current_segment(database, timeout)


# -- reading both sides -------------------------------------------------------------------------


def source_rows(pg: LocalPostgres, database: str, table: str,
                columns: list[str]) -> list[tuple[Any, ...]]:
    schema, name = table.split(".")
    cols = ", ".join(f'"{c}"' for c in columns)
    return sorted(pg.sql(f'SELECT {cols} FROM "{schema}"."{name}"', database),
                  key=lambda r: r[0])


def mirror_rows(config: Config, table: str, columns: list[str]) -> list[tuple[Any, ...]] | None:
    """The mirror's rows as DuckDB reads them (None: no mirror; [] for one never committed)."""
    catalog = open_catalog(config)
    ident = mirror_identifier(config, *table.split("."))
    if not catalog.table_exists(ident):
        return None
    t = catalog.load_table(ident)
    if t.current_snapshot() is None:
        return []
    return sorted((tuple(r[c] for c in columns) for r in duck.rows(t, columns)),
                  key=lambda r: r[0])


def assert_mirrors_equal(pg: LocalPostgres, database: str, config: Config,
                         tables: dict[str, list[str]]) -> None:
    for table, columns in tables.items():
        want = source_rows(pg, database, table, columns)
        got = mirror_rows(config, table, columns)
        assert got is not None, f"{table} has no mirror"
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        assert got == want, (f"{table}: mirror differs from the source ({len(got)} vs "
                             f"{len(want)} rows); missing {missing[:5]}, extra {extra[:5]}")


def snapshot_dirs(home: Path) -> set[Path]:
    """Directories snapshot runs wrote under the mirrors' ``data/``."""
    return {p for p in (home / "warehouse").glob("**/data/cdclake-snapshot-*") if p.is_dir()}


def progress_lines(stderr: str) -> list[re.Match[str]]:
    return [m for m in map(PROGRESS.match, stderr.splitlines()) if m]


def group_alive(pgid: int) -> dict[int, str]:
    """pid -> command of the processes of group ``pgid`` that are not zombies (a killed
    child may wait for a reaper that never comes; it runs no more)."""
    alive = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        head, _, tail = text.rpartition(")")
        fields = tail.split()  # after "pid (comm)": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive[int(stat.parent.name)] = head.partition("(")[2]
    return alive


# -- the shop: a stream's life ------------------------------------------------------------------


@dataclass
class Shop:
    pg: LocalPostgres
    database: str
    home: Path
    env: dict[str, str]
    config: Config
    ran: list[str] = field(default_factory=list)  #: run ids of successful `cdclake run`s

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        return self.pg.sql(query, self.database)

    def run(self, run_id: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                    dict[str, Any]]:
        out = ok(cdclake(self.env, "run", "--run-id", run_id, *args))
        self.ran.append(run_id)
        found = re.search(r"^report: (.+)$", out.stdout, re.M)
        assert found, f"no report file named on stdout:\n{out.stdout}"
        path = Path(found[1])
        assert path == self.home / "reports" / "runs" / f"{run_id}.json"
        text = path.read_text()
        assert PASSWORD not in text
        return out, json.loads(text)

    def client_backends(self) -> int:
        """Sessions on the source other than this one (a copy's, a held snapshot's)."""
        return int(self.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                            "current_database() AND pid <> pg_backend_pid() AND "
                            "backend_type = 'client backend'")[0][0])

    def first_run(self) -> None:
        """Tests that need mirrors but run alone get them from a plain first run."""
        if not self.ran:
            self.run("first")


@pytest.fixture(scope="module")
def shop(cluster: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> Shop:
    """Tables with rows, then `cdclake source install` (the CLI), then changes, archived."""
    db = cluster.create_database("shop")
    for stmt in BEFORE_INSTALL:
        cluster.sql(stmt, db)
    home = tmp_path_factory.mktemp("shop")
    env = env_for(cluster, home, dsn(cluster, db))
    out = ok(cdclake(env, "source", "install"))
    assert "cdclake installed in database shop" in out.stdout
    for stmt in AFTER_INSTALL:
        cluster.sql(stmt, db)
    archive_all(cluster, db)
    return Shop(cluster, db, home, env, Config.load(env=env))


def test_snapshot_mode_never_copies_nothing(cluster: LocalPostgres,
                                            tmp_path: Path) -> None:
    """Mirrors of a never-snapshotted stream hold only rows the stream changed after the
    install: an UPDATE of a row the mirror lacks puts the new row, a DELETE takes nothing.

    A table without a key (REPLICA IDENTITY DEFAULT, no primary key) gets its INSERTs; its
    UPDATE and DELETE cannot be applied, and its mirror says so wherever a person looks — a
    WARNING line of the run, the run report, ``cdclake status``, the mirror suite and its Data
    Docs page — with the way out (a new copy ends the mark: tests/unit/snapshot/test_mirror.py)."""
    db = cluster.create_database("plain")
    for stmt in ["CREATE TABLE t1 (id int PRIMARY KEY, v text)",
                 "INSERT INTO t1 SELECT g, 'old ' || g FROM generate_series(1, 20) g",
                 "CREATE TABLE t2 (id int PRIMARY KEY, v text)",
                 "INSERT INTO t2 SELECT g, 'untouched' FROM generate_series(1, 10) g",
                 "CREATE TABLE nokey (id int, v text)"]:
        cluster.sql(stmt, db)
    env = env_for(cluster, tmp_path, dsn(cluster, db), CDCLAKE_SNAPSHOT_MODE="never")
    ok(cdclake(env, "source", "install"))
    for stmt in ["INSERT INTO t1 VALUES (101, 'new'), (102, 'new')",
                 "UPDATE t1 SET v = 'updated' WHERE id IN (1, 2)",
                 "DELETE FROM t1 WHERE id = 3",
                 "INSERT INTO nokey SELECT g, 'n' FROM generate_series(1, 5) g",
                 "UPDATE nokey SET v = 'changed' WHERE id <= 2",
                 "DELETE FROM nokey WHERE id = 5"]:
        cluster.sql(stmt, db)
    archive_all(cluster, db)

    out = ok(cdclake(env, "run", "--run-id", "never"))
    report = json.loads((tmp_path / "reports" / "runs" / "never.json").read_text())
    assert report["steps"]["snapshot"]["skipped"] is True
    assert "never" in report["steps"]["snapshot"]["reason"]
    assert not progress_lines(out.stderr) and "initial snapshot" not in out.stderr
    config = Config.load(env=env)
    assert mirror_rows(config, "public.t1", ["id", "v"]) == [
        (1, "updated"), (2, "updated"), (101, "new"), (102, "new")]
    assert mirror_rows(config, "public.t2", ["id", "v"]) in (None, [])
    assert not snapshot_dirs(tmp_path)

    warning = report["inexact"]["public.nokey"]
    assert list(report["inexact"]) == ["public.nokey"]
    assert warning.startswith("public.nokey differs from its source since commit LSN ")
    assert "3 UPDATE/DELETE(s) not applied" in warning
    assert warning.endswith("fix: ALTER TABLE public.nokey REPLICA IDENTITY FULL, then "
                            "cdclake snapshot --tables public.nokey")
    assert f"WARNING: {warning}" in out.stdout.splitlines()
    assert f"    INEXACT: {warning}" in ok(cdclake(env, "status")).stdout.splitlines()
    assert mirror_rows(config, "public.nokey", ["id", "v"]) == [(i, "n") for i in range(1, 6)]
    checked = report["steps"]["validate_tables"]  # the mirror suite warns, and passes
    assert checked["success"], checked
    assert ("- warning, not failed: suite mirror_table, table public.nokey: Mirror "
            "public.nokey holds every change of its source") in checked["summary"], checked
    assert "  observed: 3" in checked["summary"].splitlines(), checked
    # and Data Docs: the mirror's validation page shows the check failed, observing 3
    (page,) = (tmp_path / "reports" / "data_docs" / "validations" / "mirror_table" / "main"
               / "public" / "nokey").rglob("*.html")
    html = page.read_text()
    at = html.index("Mirror public.nokey holds every change of its source")
    assert html.rfind("fa-times", 0, at) > html.rfind("fa-check", 0, at), "not shown failed"
    assert re.search(r">\s*3\s*<", html[at:at + 2000]), "no observed value 3"


def test_killed_first_run_then_a_run_that_copies_every_table(shop: Shop, tmp_path: Path) -> None:
    """SIGKILL the first `cdclake run` (process group: Spark's JVM and workers die with it)
    while its chunks are written; the next run removes the dead run's directory, copies
    every table with progress on stderr, reports it, and merges the stream on top."""
    log = (tmp_path / "killed.out").open("w"), (tmp_path / "killed.err").open("w")
    before = snapshot_dirs(shop.home)
    proc = subprocess.Popen([CDCLAKE, "run", "--run-id", "killed"], env=shop.env,
                            stdout=log[0], stderr=log[1], start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (snapshot_dirs(shop.home) - before):
            assert proc.poll() is None, ("the run ended before it wrote a snapshot file:\n"
                                         + (tmp_path / "killed.err").read_text()[-4000:])
            assert time.monotonic() < deadline, "no snapshot directory appeared"
            time.sleep(0.02)
        members = group_alive(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        for f in log:
            f.close()
    assert "java" in members.values(), f"Spark's JVM is not in the run's group: {members}"
    deadline = time.monotonic() + 30
    while group_alive(proc.pid) or shop.client_backends():
        assert time.monotonic() < deadline, (
            f"still running after SIGKILL: {group_alive(proc.pid)}, "
            f"{shop.client_backends()} session(s) on the source")
        time.sleep(0.1)
    assert PASSWORD not in (tmp_path / "killed.err").read_text()
    stale = snapshot_dirs(shop.home) - before
    assert stale
    # killed before its commit: the big table has no rows in the lake yet
    assert mirror_rows(shop.config, "public.big", SHOP["public.big"]) in (None, [])

    out, report = shop.run("first")
    snap = report["steps"]["snapshot"]
    tables = {t["table"]: t for t in snap["tables"]}
    assert set(tables) == set(SHOP)
    assert tables["public.big"]["rows"] == BIG_ROWS
    assert tables["public.big"]["chunks"] > 10, tables["public.big"]
    assert tables["public.small"]["rows"] == 103 and tables["other.items"]["rows"] == 502
    assert tables["public.empty_t"]["rows"] == 0
    assert snap["rows"] == BIG_ROWS + 103 + 502
    removed = {Path(p).name for t in tables.values() for p in t["stale_removed"]}
    assert removed == {p.name for p in stale}
    assert not any(p.exists() for p in stale), "the killed run's files are still there"
    # one directory per table copied (the empty table's one chunk wrote an empty file)
    assert len(snapshot_dirs(shop.home)) == len(SHOP), snapshot_dirs(shop.home)

    # the progress the user watched: a start line, then rows, rows/s and chunks per table
    assert re.search(r"^initial snapshot \S+ at [0-9A-F]+/[0-9A-F]+\.\.[0-9A-F]+/[0-9A-F]+ "
                     r"\(xmin \d+, xmax \d+, \d+ running\): 4 table\(s\)$", out.stderr, re.M), \
        out.stderr[-3000:]
    lines = progress_lines(out.stderr)
    assert lines, f"no progress line on stderr:\n{out.stderr[-3000:]}"
    last = lines[-1]
    assert int(last[1].replace(",", "")) == snap["rows"]
    assert int(last[3]) == int(last[4]) == sum(t["chunks"] for t in tables.values())
    chunks = tables["public.big"]["chunks"]
    assert f"public.big {BIG_ROWS:,} rows {chunks}/{chunks}" in last[5]
    assert f"snapshot of public.big: {BIG_ROWS} row(s) in {chunks} chunk(s) committed" \
        in out.stderr
    assert re.search(r"^snapshot: 4 table\(s\), \d+ row\(s\) copied at ", out.stderr, re.M)

    # the stream after the install is merged on top of the copy, nothing twice
    assert report["steps"]["decode"]["batch"] is not None
    assert_mirrors_equal(shop.pg, shop.database, shop.config, SHOP)
    assert source_rows(shop.pg, shop.database, "public.small", ["id", "label"])[:3] == [
        (1, "updated"), (2, "updated"), (3, "updated")]


def test_snapshot_repairs_a_damaged_mirror_and_the_stream_hands_over(shop: Shop) -> None:
    """Rows deleted from a mirror behind cdclake's back come back with `cdclake snapshot
    --tables`, in ONE new Iceberg snapshot; changes the stream has not merged yet are in the
    copy (the merge skips them) and changes after it are merged on top."""
    shop.first_run()
    catalog = open_catalog(shop.config)
    small = catalog.load_table(mirror_identifier(shop.config, "public", "small"))
    small.delete("id < 50")
    damaged = catalog.load_table(small.name())
    assert len(mirror_rows(shop.config, "public.small", SHOP["public.small"]) or []) < 60
    before = damaged.current_snapshot()
    assert before is not None
    big_before = catalog.load_table(mirror_identifier(shop.config, "public", "big")) \
        .current_snapshot()
    # in the stream, not merged yet, and in the snapshot the CLI takes: skipped by visibility
    for stmt in ["INSERT INTO small VALUES (2001, 'pre', 7)",
                 "UPDATE small SET n = n + 10 WHERE id = 20",
                 "DELETE FROM small WHERE id = 30",
                 "UPDATE big SET label = 'pre' WHERE id = 100"]:
        shop.sql(stmt)

    out = ok(cdclake(shop.env, "snapshot", "--tables", "public.small", "--json"))
    result = json.loads(out.stdout)
    assert [t["table"] for t in result["tables"]] == ["public.small"]
    assert result["tables"][0]["rows"] == shop.sql("SELECT count(*) FROM small")[0][0]
    assert progress_lines(out.stderr), out.stderr[-3000:]
    assert_mirrors_equal(shop.pg, shop.database, shop.config,
                         {"public.small": SHOP["public.small"]})
    repaired = catalog.load_table(small.name())
    after = repaired.current_snapshot()
    assert after is not None and after.snapshot_id == result["tables"][0]["snapshot_id"]
    new = [s for s in repaired.metadata.snapshots
           if s.snapshot_id not in {x.snapshot_id for x in damaged.metadata.snapshots}]
    assert [s.snapshot_id for s in new] == [after.snapshot_id], "more than one commit"
    assert after.parent_snapshot_id == before.snapshot_id
    assert catalog.load_table(mirror_identifier(shop.config, "public", "big")) \
        .current_snapshot() == big_before, "a table not named was snapshotted"

    # after the snapshot: merged on top
    for stmt in ["INSERT INTO small VALUES (2002, 'post', 8)",
                 "UPDATE small SET label = 'post' WHERE id = 2001",
                 "DELETE FROM small WHERE id = 40",
                 "INSERT INTO big VALUES (999999, 'post', 'x')"]:
        shop.sql(stmt)
    archive_all(shop.pg, shop.database)
    _, report = shop.run("after-resnapshot")
    assert report["steps"]["snapshot"]["tables"] == []
    merged = {t["table"]: t for b in report["steps"]["merge"]["batches"] for t in b["tables"]}
    assert merged["public.small"]["skipped_snapshot"] == 3, merged["public.small"]
    assert merged["public.big"]["skipped_snapshot"] == 0, merged["public.big"]
    assert_mirrors_equal(shop.pg, shop.database, shop.config, SHOP)


def test_a_stream_that_starts_after_the_snapshot_is_refused(shop: Shop,
                                                            tmp_path: Path) -> None:
    """A stream whose first batch starts after the snapshot's LSN cannot hand over: the
    changes in between would be lost. (Its progress is the shop's, moved into the future.)"""
    shop.first_run()
    layout = Layout()
    saved = load_progress(open_store(shop.config), layout)
    assert saved is not None
    progress = json.loads(open_store(shop.config).get(layout.progress_log_key(saved.seq)))
    future = parse_lsn(shop.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0]) + (1 << 28)
    progress["start_lsn"] = future
    env = env_for(shop.pg, tmp_path, dsn(shop.pg, shop.database))
    open_store(Config.load(env=env)).put(layout.progress_log_key(saved.seq),
                                         json.dumps(progress).encode())

    out = cdclake(env, "snapshot", "--tables", "public.small,other.items")
    line = one_error_line(out, "snapshot")
    assert "other.items" in line and "public.small" in line, line
    m = re.search(r"snapshot is at LSN ([0-9A-F]+/[0-9A-F]+) but the stream starts at "
                  r"([0-9A-F]+/[0-9A-F]+)", line)
    assert m, line
    assert parse_lsn(m[2]) == future and parse_lsn(m[1]) < future, line
    assert format_lsn(future) in line
    assert not snapshot_dirs(tmp_path), "files were written before the check"


def test_bad_input_is_one_line_and_exit_2(shop: Shop, tmp_path: Path) -> None:
    """What a user can get wrong fails before any copy: one line, exit 2, no traceback, no
    password (cdclake() checks every output for it)."""
    env = env_for(shop.pg, tmp_path, dsn(shop.pg, shop.database))
    line = one_error_line(cdclake(env, "snapshot", "--tables", "nope"), "snapshot")
    assert "'nope'" in line and "schema.table" in line, line
    line = one_error_line(cdclake(env, "snapshot", "--tables", "public.small,public.missing"),
                          "snapshot")
    assert "public.missing" in line and "public.small" not in line, line
    line = one_error_line(cdclake({**env, "CDCLAKE_TABLES": "other.items"}, "snapshot",
                                  "--tables", "public.small"), "snapshot")
    assert "public.small" in line and "CDCLAKE_TABLES" in line, line
    line = one_error_line(cdclake({**env, "CDCLAKE_SNAPSHOT_MODE": "sometimes"}, "run"), "run")
    assert "snapshot_mode" in line and "'sometimes'" in line, line

    gone = {**env, "CDCLAKE_SOURCE_DSN": dsn(shop.pg, shop.database, port=free_port())}
    line = one_error_line(cdclake(gone, "snapshot"), "snapshot")
    assert "cannot connect to the source" in line, line
    # a run ships first (one line for it), then fails at the snapshot in one line
    out = cdclake(gone, "run", "--run-id", "unreachable")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = [x for x in out.stderr.splitlines() if x.startswith("cdclake run: error: ")]
    assert len(errors) == 1 and "cannot connect to the source" in errors[0], out.stderr
    report = (tmp_path / "reports" / "runs" / "unreachable.json").read_text()
    assert "cannot connect to the source" in report and PASSWORD not in report
    assert not snapshot_dirs(tmp_path)


def test_the_source_going_away_mid_copy_is_one_line_and_commits_nothing(shop: Shop) -> None:
    """While `cdclake snapshot` copies, the source goes away: every session of the shop
    database terminated (pg_terminate_backend: the copies' and the one holding the snapshot),
    then the whole server stopped. Each time: one line naming the source and the table, exit
    2, no traceback, and the mirror exactly as before (nothing half-committed)."""
    shop.first_run()
    catalog = open_catalog(shop.config)
    ident = mirror_identifier(shop.config, "public", "big")
    before = catalog.load_table(ident).current_snapshot()
    rows_before = mirror_rows(shop.config, "public.big", SHOP["public.big"])

    def snapshot_while(fault: Callable[[], None]) -> str:
        proc = subprocess.Popen([CDCLAKE, "snapshot", "--tables", "public.big"], env=shop.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while not shop.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name "
                               "= 'cdclake-snapshot'")[0][0]:
                assert proc.poll() is None, f"the copy ended before the fault: {proc.stderr}"
                assert time.monotonic() < deadline, "no copy started"
                time.sleep(0.02)
            fault()
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert PASSWORD not in out + err
        line = one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out,
                                                          err.splitlines()[-1] + "\n"),
                              "snapshot")
        noise = [x for x in err.splitlines()[:-1] if not PROGRESS.match(x)
                 and not x.startswith("initial snapshot ")]
        assert not noise and "Traceback" not in err, err[-4000:]
        assert f"{ROLE}@127.0.0.1:{shop.pg.port}/{shop.database}" in line, line
        assert "public.big" in line, line
        now = catalog.load_table(ident).current_snapshot()
        assert now == before, "the failed snapshot committed"
        return line

    line = snapshot_while(lambda: shop.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
        "current_database() AND pid <> pg_backend_pid()"))
    assert "ended the snapshot's session during the copy" in line, line
    try:
        snapshot_while(lambda: shop.pg.stop("immediate"))
    finally:
        shop.pg.start()
    assert mirror_rows(shop.config, "public.big", SHOP["public.big"]) == rows_before


def test_a_table_selection_that_selects_nothing_is_refused_before_anything_is_lost(
        shop: Shop, tmp_path: Path) -> None:
    """`--tables` with a typo or a partitioned table (its rows are in its partitions) merged
    nothing and said nothing; CDCLAKE_TABLES with a typo decoded the stream without the
    changes of every table that exists. Each is now one line, exit 2, before the merge (and,
    for CDCLAKE_TABLES, before the decode): the next plain run loses nothing."""
    shop.first_run()
    for stmt in ["CREATE TABLE meas (id int, at date, v int) PARTITION BY RANGE (at)",
                 "CREATE TABLE meas_a PARTITION OF meas FOR VALUES FROM ('2024-01-01') "
                 "TO ('2025-01-01')",
                 "CREATE TABLE meas_b PARTITION OF meas FOR VALUES FROM ('2025-01-01') "
                 "TO ('2026-01-01')",
                 "INSERT INTO meas VALUES (1, '2024-06-01', 1), (2, '2025-06-01', 2)",
                 "UPDATE small SET label = 'selected' WHERE id = 5"]:
        shop.sql(stmt)
    archive_all(shop.pg, shop.database)
    store = open_store(shop.config)
    merged = {t: mirror_rows(shop.config, t, SHOP[t]) for t in SHOP}
    env = {**shop.env, "CDCLAKE_SNAPSHOT_MODE": "never"}  # the partitions' copies: not needed

    out = cdclake(env, "run", "--run-id", "typo", "--tables", "public.smal,public.meas")
    errors = [x for x in out.stderr.splitlines() if x.startswith("cdclake run: error: ")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr[-4000:]
    assert errors[0] == (
        "cdclake run: error: the run's tables: public.smal is not a table the stream's "
        "dictionary knows (did you mean public.small?); public.meas is a partitioned table, "
        "whose rows are in its partitions: name those (public.meas_a, public.meas_b); nothing "
        "was merged")
    assert {t: mirror_rows(shop.config, t, SHOP[t]) for t in SHOP} == merged
    report = json.loads((shop.home / "reports" / "runs" / "typo.json").read_text())
    assert report["steps"]["error"] == "ConfigError: " + errors[0].split("error: ", 1)[1]

    shop.sql("UPDATE small SET label = 'not lost' WHERE id = 6")
    archive_all(shop.pg, shop.database)
    progress = load_progress(store, Layout())
    out = cdclake({**env, "CDCLAKE_TABLES": "public.smal,public.big"}, "run")
    errors = [x for x in out.stderr.splitlines() if x.startswith("cdclake run: error: ")]
    assert out.returncode == 2 and errors == [
        "cdclake run: error: CDCLAKE_TABLES: public.smal is not a table the stream's "
        "dictionary knows (did you mean public.small?); nothing was decoded"], out.stderr
    assert load_progress(store, Layout()) == progress  # no batch decoded without small
    out = cdclake({**env, "CDCLAKE_EXCLUDE_TABLES": "public.bgi"}, "run")
    assert out.returncode == 2 and "cdclake run: error: CDCLAKE_EXCLUDE_TABLES: public.bgi is " \
        "not a table the stream's dictionary knows (did you mean public.big?); nothing was " \
        "decoded\n" in out.stderr, out.stderr
    assert load_progress(store, Layout()) == progress

    ok(cdclake(env, "run"))
    assert_mirrors_equal(shop.pg, shop.database, shop.config, SHOP)
    assert ("not lost",) in [r[1:2] for r in mirror_rows(shop.config, "public.small",
                                                         SHOP["public.small"]) or []]
