"""``cdclake run --follow`` as a user runs it: a real process against PostgreSQL 15, a local
``file://`` store and a local Spark, every mirror read back with DuckDB.

One follower lives through the module: it takes each change as its segment is archived (the
stream carries every row: ``snapshot_mode = never``, tables empty at the install), a
scheduled ``cdclake run`` meanwhile refuses cleanly (the follower holds the decode lease), a
quiet archive starts no run, and SIGTERM in the middle of a run lets the step finish and ends
the follower with status 0, its JVM with it; the next run goes on from there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from cdclake.config import Config
from cdclake.local.postgres import LocalPostgres
from tests.e2e.pipeline.test_snapshot_cli import (
    CDCLAKE,
    PASSWORD,
    ROLE,
    archive_all,
    cdclake,
    dsn,
    env_for,
    group_alive,
    mirror_rows,
    ok,
    one_error_line,
    source_rows,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = {"public.accounts": ["id", "owner", "balance"], "public.tags": ["tag", "weight"]}
SCHEMA = [
    "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance bigint)",
    "CREATE TABLE tags (tag text, weight int)",
    "ALTER TABLE tags REPLICA IDENTITY FULL",
]


@dataclass
class Follower:
    """A running ``cdclake run --follow``: its process and what it printed so far."""

    process: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [line for line in self.out if line.startswith("run ")]

    def wait_for(self, predicate: object, what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():  # type: ignore[operator]
            assert self.process.poll() is None, (f"the follower exited "
                                                 f"{self.process.returncode}:\n"
                                                 + "".join(self.err[-30:]))
            assert time.monotonic() < deadline, f"{what} within {timeout}s:\n" + \
                "".join(self.err[-30:])
            time.sleep(0.2)


@dataclass
class Stream:
    pg: LocalPostgres
    database: str
    env: dict[str, str]
    config: Config
    follower: Follower

    def sql(self, query: str) -> None:
        self.pg.sql(query, self.database)

    def mirrored(self) -> bool:
        """Every mirror holds its source's rows (``tags`` has no key: compared as multisets)."""
        return all(
            sorted(mirror_rows(self.config, table, columns) or [], key=repr)
            == sorted(source_rows(self.pg, self.database, table, columns), key=repr)
            for table, columns in TABLES.items())


def _read(stream: object, into: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append(line)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stream]:
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    process = None
    try:
        pg.sql(f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
        db = pg.create_database("shop")
        for ddl in SCHEMA:
            pg.sql(ddl, db)
        home = tmp_path_factory.mktemp("follow")
        env = env_for(pg, home, dsn(pg, db), CDCLAKE_SNAPSHOT_MODE="never",
                      CDCLAKE_FOLLOW_POLL="0.5", CDCLAKE_LEASE_WAIT="1")
        ok(cdclake(env, "source", "install"))
        process = subprocess.Popen([CDCLAKE, "run", "--follow"], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
        follower = Follower(process)
        for pipe, into in ((process.stdout, follower.out), (process.stderr, follower.err)):
            threading.Thread(target=_read, args=(pipe, into), daemon=True).start()
        yield Stream(pg, db, env, Config.load(env=env), follower)
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        pg.destroy()


def test_follower_takes_each_archived_segment(stream: Stream) -> None:
    follower = stream.follower
    stream.sql("INSERT INTO accounts SELECT g, 'owner ' || g, g FROM generate_series(1, 300) g")
    stream.sql("INSERT INTO tags SELECT 'tag ' || (g % 7), g % 3 FROM generate_series(1, 40) g")
    archive_all(stream.pg, stream.database)
    follower.wait_for(stream.mirrored, "the inserts mirrored")
    stream.sql("UPDATE accounts SET balance = balance * 2, owner = 'x' WHERE id % 3 = 0")
    stream.sql("DELETE FROM accounts WHERE id > 250")
    stream.sql("DELETE FROM tags WHERE weight = 1")
    stream.sql("UPDATE tags SET weight = 9 WHERE tag = 'tag 2'")
    archive_all(stream.pg, stream.database)
    follower.wait_for(stream.mirrored, "the updates and deletes mirrored")
    # one line per run: where the stream stands and each step's seconds
    assert any("merge " in line and "decode " in line for line in follower.runs())
    assert PASSWORD not in "".join(follower.out + follower.err)


def test_a_scheduled_run_refuses_while_following(stream: Stream) -> None:
    out = cdclake(stream.env, "run")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]  # after the lines of the steps before decode
    assert line.startswith("cdclake run: error: another run holds the decode lease"), line
    assert "cdclake run --follow of stream main" in line, line
    assert stream.follower.process.poll() is None


def test_a_quiet_archive_starts_no_run(stream: Stream) -> None:
    follower = stream.follower
    follower.wait_for(lambda: not follower.err or not follower.err[-1].startswith(
        ("ship:", "snapshot:", "decode:", "validate_stream:", "merge:")), "the last run ended")
    time.sleep(2)
    before = len(follower.runs())
    time.sleep(5)  # ten polls
    assert len(follower.runs()) == before


def test_sigterm_finishes_the_step_and_exits_0(stream: Stream) -> None:
    follower = stream.follower
    stream.sql("INSERT INTO accounts SELECT g, 'late ' || g, g FROM generate_series(1001, 1200) g")
    stream.sql("UPDATE tags SET weight = weight + 1")
    errors = len(follower.err)
    archive_all(stream.pg, stream.database)
    follower.wait_for(lambda: any(line.startswith("ship: shipped 1")
                                  for line in follower.err[errors:]), "a run started")
    follower.process.send_signal(signal.SIGTERM)
    assert follower.process.wait(timeout=120) == 0, "".join(follower.err[-30:])
    # its JVM ended before it did
    assert group_alive(follower.process.pid) == {}, "the follower left processes behind"
    said = "".join(follower.err[errors:])
    assert "SIGTERM: finishing the step under way" in said
    assert "cdclake run: stopped after" in said
    assert "Traceback" not in said
    # what the stopped run left, the next run takes
    ok(cdclake(stream.env, "run"))
    assert stream.mirrored()


def test_follow_refuses_what_is_for_one_run(stream: Stream) -> None:
    for args in (["--dry-run"], ["--end-lsn", "0/5000000"], ["--run-id", "x"]):
        line = one_error_line(cdclake(stream.env, "run", "--follow", *args), "run")
        assert "--follow" in line, line
    bad = {**stream.env, "CDCLAKE_FOLLOW_POLL": "0"}
    line = one_error_line(cdclake(bad, "run", "--follow"), "run")
    assert "follow_poll must be at least 0.1 seconds" in line, line

