"""Real faults on a stream: ``cdclake run`` SIGKILLed at every step boundary and between two
table commits of a merge, and runs that overlap — then the mirrors, read with DuckDB, equal
the source, nothing lost, nothing twice.

The kills are real: the run's whole process group (Spark's JVM and Python workers with it)
gets SIGKILL as soon as the run reports a step done on stderr, or as soon as the SQLite catalog
shows the merge's first table commit. Each killed run leaves what it left; the next run
starts from there.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdclake import errors as errors_module
from cdclake.archive import Layout, open_store
from cdclake.archive.lease import DECODE, Lease
from cdclake.config import Config
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn, parse_segment_name
from cdclake.stream.progress import load_progress
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

#: the tables and the columns compared; ``tags`` has no key (REPLICA IDENTITY FULL), so a
#: change merged twice would show as a duplicate row
TABLES = {"public.accounts": ["id", "owner", "balance"],
          "public.events": ["id", "kind", "amount"],
          "public.tags": ["tag", "weight"]}
SCHEMA = [
    "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance bigint)",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount int)",
    "CREATE TABLE tags (tag text, weight int)",
    "ALTER TABLE tags REPLICA IDENTITY FULL",
    "INSERT INTO accounts SELECT g, 'owner ' || g, g FROM generate_series(1, 2000) g",
    "INSERT INTO tags SELECT 'tag ' || (g % 50), g % 7 FROM generate_series(1, 300) g",
]
STEPS = ("ship", "snapshot", "decode", "validate_stream", "merge")
MB = 1 << 20  #: the clusters' WAL segment size


@dataclass
class Stream:
    pg: LocalPostgres
    database: str
    home: Path
    env: dict[str, str]
    round: int = 0

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        return self.pg.sql(query, self.database)

    @property
    def config(self) -> Config:
        return Config.load(env=self.env)

    def changes(self, rows: int = 400) -> None:
        """A round of every kind of change on every table, archived."""
        self.round += 1
        r, base = self.round, self.round * 100_000
        self.sql(f"INSERT INTO events SELECT {base} + g, 'round {r}', g "
                 f"FROM generate_series(1, {rows}) g")
        self.sql(f"UPDATE accounts SET balance = balance + {r}, owner = owner || '.' "
                 f"WHERE id % 5 = {r % 5}")
        self.sql(f"DELETE FROM events WHERE id > {base} AND id % 10 = 0")
        self.sql(f"UPDATE tags SET weight = weight + 1 WHERE tag = 'tag {r % 50}'")
        self.sql(f"INSERT INTO tags VALUES ('tag {r % 50}', 1), ('tag {r % 50}', 1)")
        self.sql(f"DELETE FROM tags WHERE ctid IN (SELECT ctid FROM tags "
                 f"WHERE tag = 'tag {(r + 1) % 50}' LIMIT 2)")
        archive_all(self.pg, self.database)

    def assert_mirrors_equal(self, tables: Mapping[str, list[str]] = TABLES) -> None:
        config = self.config
        for table, columns in tables.items():
            want = Counter(source_rows(self.pg, self.database, table, columns))
            got = Counter(mirror_rows(config, table, columns) or [])
            assert got == want, (f"{table}: missing {list((want - got).items())[:5]}, "
                                 f"extra {list((got - want).items())[:5]}")


@contextlib.contextmanager
def bank_stream(home: Path, schema: Sequence[str] = SCHEMA,
                **settings: str) -> Iterator[Stream]:
    """A PostgreSQL 15 cluster with the bank's tables (or ``schema``), installed, and a
    cdclake home (``settings``: more CDCLAKE_* variables)."""
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        pg.sql(f"CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
        db = pg.create_database("bank")
        for stmt in schema:
            pg.sql(stmt, db)
        env = env_for(pg, home, dsn(pg, db), CDCLAKE_LEASE_WAIT="300", **settings)
        ok(cdclake(env, "source", "install"))
        yield Stream(pg, db, home, env)
    finally:
        pg.destroy()


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stream]:
    with bank_stream(tmp_path_factory.mktemp("bank")) as s:
        yield s


def start_run(stream: Stream, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen([CDCLAKE, "run", "--run-id", run_id], env=stream.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the run and everything it started; wait until none of it runs."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while group_alive(proc.pid):
        assert time.monotonic() < deadline, f"alive after SIGKILL: {group_alive(proc.pid)}"
        time.sleep(0.1)


def metadata_locations(config: Config) -> dict[str, str]:
    """Each mirror's current metadata file, as the SQLite catalog says (only read; not
    ``mode=ro``: a read-only connection cannot open a WAL-mode database whose shared-memory
    file is gone)."""
    db = Path(config.effective_catalog_uri().removeprefix("sqlite:///"))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return {name: loc for name, loc in conn.execute(
            "SELECT table_name, metadata_location FROM iceberg_tables")}


def test_a_run_killed_at_each_step_boundary_is_finished_by_the_next(stream: Stream) -> None:
    """Run after run, each SIGKILLed just after it reports one more step done: ship, snapshot,
    decode, validate_stream, merge. Every run resumes from what the killed one left."""
    for step in STEPS:
        stream.changes()
        proc = start_run(stream, f"killed-after-{step}")
        assert proc.stderr is not None
        seen: list[str] = []
        try:
            for line in proc.stderr:
                seen.append(line)
                if line.startswith(f"{step}: "):
                    break
            else:
                pytest.fail(f"the run ended before step {step}:\n{''.join(seen)[-3000:]}")
        finally:
            kill_group(proc)
        assert "Traceback" not in "".join(seen) and PASSWORD not in "".join(seen)
    stream.changes()
    ok(cdclake(stream.env, "run", "--run-id", "after-the-kills"))
    stream.assert_mirrors_equal()
    progress = load_progress(open_store(stream.config), Layout())
    assert progress is not None and progress.seq >= 3


def test_a_merge_killed_between_two_table_commits_is_finished_by_the_next_run(
        stream: Stream) -> None:
    config = stream.config
    ok(cdclake(stream.env, "run", "--run-id", "settle"))
    stream.changes(rows=60_000)  # a merge of seconds per table
    before = metadata_locations(config)
    proc = start_run(stream, "killed-mid-merge")
    assert proc.stderr is not None
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True).start()
    try:
        deadline = time.monotonic() + 240
        while True:
            now = metadata_locations(config)
            if any(now.get(t) != loc for t, loc in before.items()):
                break
            assert proc.poll() is None, "the run ended before its merge:\n" + "".join(lines)
            assert time.monotonic() < deadline, "no table commit within 240 s"
            time.sleep(0.005)
    finally:
        kill_group(proc)
    after = metadata_locations(config)
    moved = [t for t in before if after[t] != before[t]]
    assert 0 < len(moved) < len(before), f"the kill was not between table commits: {moved}"
    ok(cdclake(stream.env, "run", "--run-id", "heals-the-merge"))
    stream.assert_mirrors_equal()


def test_a_run_while_another_holds_the_stream_waits_or_refuses(stream: Stream) -> None:
    """A second run refuses (one line, exit 2) while another run holds the decode lease, and
    two runs started together both finish, one after the other, with nothing lost or twice."""
    config = stream.config
    store = open_store(config)
    stream.changes()
    seq = load_progress(store, Layout()).seq  # type: ignore[union-attr]
    with Lease(store, DECODE, purpose="a run in another terminal", ttl=60, wait=0):
        out = cdclake({**stream.env, "CDCLAKE_LEASE_WAIT": "2"}, "run", "--json",
                      "--run-id", "refused")
    line = one_error_line(out, "run")
    assert "another run holds the decode lease" in line and "a run in another terminal" in line
    assert load_progress(store, Layout()).seq == seq  # type: ignore[union-attr]

    stream.changes()
    runs = [subprocess.Popen([CDCLAKE, "run", "--run-id", f"together-{i}"], env=stream.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for i in (1, 2)]
    errs = [p.communicate(timeout=600)[1] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], "\n---\n".join(e[-6000:] for e in errs)
    stream.assert_mirrors_equal()
    progress = load_progress(store, Layout())
    assert progress is not None and progress.seq > seq
    logged = [o.key for o in store.list(Layout().progress_log_prefix())]
    numbers = [int(k.rsplit("/", 1)[1].removesuffix(".json")) for k in logged]
    assert numbers == list(range(numbers[0], numbers[-1] + 1)), numbers


def test_an_error_inside_a_spark_task_is_one_line_and_the_report_is_written(
        stream: Stream, tmp_path: Path) -> None:
    """A byte of a segment damaged before it was archived (a stream of its own, in a new
    store; its manifest entry records the damaged copy's sha256, so the check on read passes
    it): the Spark task that reads the record fails in a Python worker. ``cdclake run`` says
    what and where in one line, exits 2 and writes its report with that error; the traces are
    in Spark's log."""
    # bytes of the round's first records, which the first batch reads (it starts at the
    # install's dictionary message): eight of them, more than a record's padding can be
    at = parse_lsn(stream.sql("SELECT pg_current_wal_insert_lsn()::text")[0][0]) + 256
    stream.changes()
    env = env_for(stream.pg, tmp_path, dsn(stream.pg, stream.database))
    ok(cdclake(env, "ship"))
    damaged = next(p for p in (tmp_path / "store" / "wal").iterdir()
                   if len(p.name) == 24 and parse_segment_name(p.name, MB).segno == at // MB)
    data = bytearray(damaged.read_bytes())
    for i in range(at % MB, at % MB + 8):
        data[i] ^= 0xFF
    damaged.chmod(0o600)
    damaged.write_bytes(bytes(data))
    entry = tmp_path / "store" / "manifest" / "wal" / f"{damaged.name}.json"
    recorded = json.loads(entry.read_text())
    entry.chmod(0o600)
    entry.write_text(json.dumps({**recorded, "sha256": hashlib.sha256(data).hexdigest()}))
    del env["CDCLAKE_ARCHIVE_DIR"]  # the run must not ship (or compare) the good copy

    out = cdclake(env, "run", "--run-id", "damaged")
    assert out.returncode == 2, out.stderr[-4000:]
    lines = out.stderr.splitlines()
    errors = [x for x in lines if x.startswith("cdclake run: error: ")]
    assert len(errors) == 1, out.stderr[-4000:]
    # the record holding the byte: it may have begun in the segment before
    where = re.search(r"\(segment file://\S+/wal/([0-9A-F]{24}), LSN ([0-9A-F]+/[0-9A-F]+)\)$",
                      errors[0])
    assert where, errors[0]
    assert at - MB <= parse_lsn(where[2]) <= at + 8, errors[0]
    assert "Traceback" not in out.stderr and "py4j" not in out.stderr.lower(), out.stderr[-4000:]
    assert not [x for x in lines if x.startswith(("\t", " ", "org.apache", "java."))], \
        out.stderr[-4000:]
    report = json.loads((tmp_path / "reports" / "runs" / "damaged.json").read_text())
    name, _, message = report["steps"]["error"].partition(": ")
    assert message == errors[0].removeprefix("cdclake run: error: ")
    assert isinstance(getattr(errors_module, name, None), type), report["steps"]["error"]
    assert report["steps"]["snapshot"]["tables"], "the steps before the failure are reported"
    assert "decode" not in report["steps"]
    assert message in (tmp_path / "logs" / "spark.log").read_text()  # the worker's traceback
    assert load_progress(open_store(Config.load(env=env)), Layout()) is None
