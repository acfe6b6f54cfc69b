"""A real failover: a standby made from a copy of the primary's data directory is promoted
(timeline 2), while the old primary goes on writing timeline 1 past the switch point — before
the promotion (its archiver gets there first) and after it, when it comes back. Both servers
archive with ``cdclake wal-push`` into the same stores.

The lake must follow timeline 2 only: a run right after the promotion (timeline 2's history
is archived, its first segment is not) and runs after the old primary's return leave every
mirror, read with DuckDB, equal to the new primary's table — none of the old primary's rows;
wal-push refuses the old primary's segments past the switch point; and a second stream that
decoded the old primary's WAL before the history file existed stops with one line saying so.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import Layout, open_store
from cdclake.archive.command import store_env, wal_push_command
from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import OWNER, LocalPostgres
from cdclake.pipeline import steps
from cdclake.stream.progress import load_progress
from tests.oracle.pipeline.harness import PipelineRun, compare_mirrors, describe
from tests.support import duck
from tests.support.commands import CDCLAKE, one_error_line

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCHEMA = [
    "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance bigint)",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL, amount int)",
    "INSERT INTO accounts SELECT g, 'opened', 100 FROM generate_series(1, 300) g",
]
#: what the old primary writes after the copy: no row of the lake may ever say it
OLD = "old primary"


def _write(pg: LocalPostgres, database: str, who: str, round_: int) -> None:
    """Inserts, updates of rows both servers have (the old primary's would overwrite the new
    one's), deletes; a transaction per statement."""
    base = round_ * 10_000
    for sql in (f"INSERT INTO events SELECT {base} + g, '{who}', g "
                "FROM generate_series(1, 400) g",
                f"UPDATE accounts SET owner = '{who}', balance = balance + {round_} "
                f"WHERE id % 4 = {round_ % 4}",
                f"DELETE FROM events WHERE id > {base} AND id % 9 = 0",
                f"INSERT INTO accounts SELECT {base} + g, '{who}', 0 "
                "FROM generate_series(1, 20) g"):
        pg.sql(sql, database)


def _archive(pg: LocalPostgres, timeout: float = 60) -> str:
    """Close the current segment; wait until archive_command has pushed it; its name."""
    segment = str(pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0])
    pg.sql("SELECT pg_switch_wal()")
    deadline = time.monotonic() + timeout
    while (str(pg.sql("SELECT last_archived_wal FROM pg_stat_archiver")[0][0] or "")[:24]
           < segment):
        assert time.monotonic() < deadline, f"{segment} was not archived in {timeout}s"
        time.sleep(0.1)
    return segment


def _owned_dir(path: Path) -> Path:
    """A directory the server's user may write (its wal-push writes the stores)."""
    path.mkdir(mode=0o755, exist_ok=True)
    path.chmod(0o755)
    if os.geteuid() == 0:
        user = pwd.getpwnam(OWNER)
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def _standby_copy(primary: LocalPostgres, base: Path) -> LocalPostgres:
    """A standby made from a copy of the stopped primary's data directory (a cold backup): it
    replays the WAL the copy holds, then waits — it receives nothing more — until promoted."""
    _owned_dir(base)
    subprocess.run(["cp", "-a", str(primary.data_dir), str(base / "data")], check=True)
    standby = LocalPostgres(primary.version, base, wal_segsize_mb=1)
    with open(standby.data_dir / "postgresql.auto.conf", "a") as f:
        f.write(f"port = {standby.port}\n")
    signal = standby.data_dir / "standby.signal"
    signal.touch()
    owner = standby.data_dir.stat()
    os.chown(signal, owner.st_uid, owner.st_gid)
    return standby


def _mirrored(config: Config, column: str, table: str) -> list[Any]:
    """One column of a mirror, as DuckDB reads it."""
    catalog = open_catalog(config)
    mirror = catalog.load_table(mirror_identifier(config, "public", table))
    return [r[column] for r in duck.rows(mirror, [column])]


def _assert_follows(new: LocalPostgres, database: str, config: Config,
                    merges: list[dict[str, Any]]) -> None:
    """Every mirror equals the new primary's table, and no row is the old primary's."""
    diffs, _ = compare_mirrors(new, PipelineRun(database, "", 0, config, merges=merges))
    assert not diffs, describe(diffs)
    assert OLD not in _mirrored(config, "owner", "accounts")
    assert OLD not in _mirrored(config, "kind", "events")


def test_the_lake_follows_the_promoted_timeline(spark: Any, tmp_path: Path) -> None:
    # not under tmp_path: pytest's is private to root, and the servers run as postgres
    shared = _owned_dir(Path(tempfile.mkdtemp(prefix="cdclake-failover-")))
    stream = Config(home=tmp_path / "home", store_url=_owned_dir(shared / "stream").as_uri(),
                    spark_master="local[2]", spark_partitions=2)
    late = stream.replace(home=tmp_path / "late", store_url=_owned_dir(shared / "late").as_uri())
    run_as = OWNER if os.geteuid() == 0 else None
    # both streams' pushes in one script: PostgreSQL 15 runs no archive_command longer than
    # 1023 bytes, and each wal-push command is over half of that
    script = shared / "archive.sh"
    script.write_text("#!/bin/sh\nset -e\n" + "".join(
        wal_push_command(c, run_as=run_as, verbose=True).removesuffix("%p") + '"$1"\n'
        for c in (stream, late)))
    script.chmod(0o755)
    command = f"{script} %p"
    old = LocalPostgres.create(15, base_dir=shared / "old", wal_segsize_mb=1,
                               archive_command=command)
    new: LocalPostgres | None = None
    try:
        old.start()
        db = old.create_database("bank")
        for sql in SCHEMA:
            old.sql(sql, db)
        install(old.dsn(db))
        _write(old, db, "before the failover", 1)
        _archive(old)
        first = steps.run_once(stream.replace(source_dsn=old.dsn(db)), spark=spark)
        assert first["steps"]["decode"]["batch"] is not None

        old.stop()
        new = _standby_copy(old, shared / "new")
        # the old primary goes on: what it writes now the standby never receives, and its
        # archiver pushes it before timeline 2's history exists
        old.start()
        for round_ in (2, 3):
            _write(old, db, OLD, round_)
            _archive(old)
        # a second stream decodes that WAL now; nothing could tell it apart yet
        steps.run_once(late.replace(source_dsn=old.dsn(db)), spark=spark)
        assert OLD in _mirrored(late, "owner", "accounts")
        old.stop("immediate")  # the old primary fails

        new.start()
        new.sql("SELECT pg_promote()")
        store = open_store(stream)
        deadline = time.monotonic() + 60
        while store.head(Layout().history_key(2)) is None:
            assert time.monotonic() < deadline, "00000002.history was not archived"
            time.sleep(0.1)
        stream = stream.replace(source_dsn=new.dsn(db))
        late = late.replace(source_dsn=new.dsn(db))

        # timing 1: right after the promotion, before timeline 2's first segment is archived
        merges = [steps.run_once(stream, spark=spark)["steps"]["merge"]]
        _assert_follows(new, db, stream, merges)

        # the late stream read timeline 1 past the switch point: one line, nothing more
        env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
        env.update(store_env(late), CDCLAKE_HOME=str(late.home),
                   CDCLAKE_SOURCE_DSN=late.source_dsn, CDCLAKE_SPARK_MASTER="local[2]")
        out = subprocess.run([CDCLAKE, "run", "--json"], env=env, capture_output=True,
                             text=True, timeout=300)
        line = one_error_line(out, "run")
        for part in ("read WAL of timeline 1", "00000002.history", "timeline 2 never had",
                     "start a new one"):
            assert part in line, line

        # the new primary writes; the old primary comes back and writes too
        _write(new, db, "new primary", 4)
        _archive(new)
        old.start()
        _write(old, db, OLD, 5)
        refused = str(old.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0])
        old.sql("SELECT pg_switch_wal()")
        deadline = time.monotonic() + 60
        while old.sql("SELECT last_failed_wal FROM pg_stat_archiver")[0][0] != refused:
            assert time.monotonic() < deadline, f"{refused} was not refused"
            time.sleep(0.1)
        assert store.head(Layout().wal_key(refused)) is None
        assert store.head(Layout().manifest_key(refused)) is None
        assert (f"cdclake wal-push: conflict: WAL file {refused} is on timeline 1"
                in old.log_file.read_text())

        # timing 2: runs after the old primary's return continue on timeline 2
        merges.append(steps.run_once(stream, spark=spark)["steps"]["merge"])
        _assert_follows(new, db, stream, merges)
        _write(new, db, "new primary", 6)
        _archive(new)
        merges.append(steps.run_once(stream, spark=spark)["steps"]["merge"])
        _assert_follows(new, db, stream, merges)
        progress = load_progress(store, Layout())
        assert progress is not None and progress.timeline == 2
        assert progress.last_segment.startswith("00000002")
        status = subprocess.run([CDCLAKE, "status"], env={**env, **store_env(stream),
                                "CDCLAKE_HOME": str(stream.home)},
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0 and "following timeline 2" in status.stdout, status
    finally:
        old.destroy()
        if new is not None:
            new.destroy()
        shutil.rmtree(shared, ignore_errors=True)
