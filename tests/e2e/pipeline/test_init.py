"""``cdclake init`` on a real PostgreSQL 15, its printed steps followed as a user would.

The configuration file it writes is the only setting the commands get (``CDCLAKE_CONFIG``);
the ``ALTER SYSTEM`` lines it prints are run as printed, the server restarted, then ``cdclake
source install`` and ``SELECT pg_switch_wal()``: the segment the install wrote must reach the
store through the printed ``archive_command`` (as the server's user, ``postgres`` when the
suite runs as root), and ``cdclake status`` must see it there. The command that builds the
archive_command is the one tests/e2e/archive/test_postgres_archiving.py runs on PostgreSQL 15
and 18; what is new here is the file and the lines, the same on every version.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.archive import open_store
from cdclake.config import Config
from cdclake.local.postgres import OWNER, LocalPostgres
from tests.e2e.pipeline.test_snapshot_cli import cdclake, ok

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pg() -> Iterator[LocalPostgres]:
    with LocalPostgres.create(15, wal_segsize_mb=1) as server:
        server.create_database("shop")
        server.sql("CREATE TABLE items (id int PRIMARY KEY, name text)", "shop")
        server.sql("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 50) g",
                   "shop")
        yield server


def test_the_printed_steps_archive_to_the_store_and_status_sees_it(
        pg: LocalPostgres, tmp_path: Path) -> None:
    # the server's user writes the store: pytest's own directories are closed to it
    store = Path(tempfile.mkdtemp(prefix="cdclake-init-store-"))
    if os.geteuid() == 0:
        shutil.chown(store, OWNER)
    try:
        _follow_the_steps(pg, store, tmp_path / "home")
    finally:
        shutil.rmtree(store)


def _follow_the_steps(pg: LocalPostgres, store: Path, home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    args = ("init", "--dsn", pg.dsn("shop"), "--store", str(store), "--home", str(home))
    out = ok(cdclake(env, *args))
    config_file = home / "cdclake.toml"
    assert f"wrote {config_file} (mode 0600)" in out.stdout
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    config = Config.load(config_file, env={})
    assert (config.home, config.source_dsn, config.store_url) == (home, pg.dsn("shop"),
                                                                  str(store))
    again = cdclake(env, *args)  # never over a file it wrote before, unless told
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert f"{config_file} exists" in again.stderr

    statements = re.findall(r"^ +(ALTER SYSTEM SET .*;)$", out.stdout, re.M)
    assert [s.split()[3] for s in statements] == ["wal_level", "archive_mode",
                                                  "archive_command"], out.stdout
    for statement in statements:
        pg.sql(statement)
    pg.stop()
    pg.start()

    env["CDCLAKE_CONFIG"] = str(config_file)
    ok(cdclake(env, "source", "install"))
    segment = pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0]
    pg.sql("SELECT pg_switch_wal()")
    wal = open_store(config)
    deadline = time.monotonic() + 60
    while not any(o.key.endswith(segment) for o in wal.list("wal/")):
        failed = pg.sql("SELECT last_failed_wal FROM pg_stat_archiver")[0][0]
        assert failed is None, f"archive_command failed on {failed}: " + (
            pg.log_file.read_text()[-2000:])
        assert time.monotonic() < deadline, f"{segment} never reached the store"
        time.sleep(0.2)
    status = ok(cdclake(env, "status")).stdout
    assert segment in status, status
