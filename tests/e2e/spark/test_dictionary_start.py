"""A new stream given no start LSN starts at ``cdclake source install``'s full dictionary.

The archived WAL begins before the install: rows are written into tables it has never
described (their descriptions lie in an earlier install, outside the archive) by
transactions that commit before it, and by one that is open across it (running at the first
running-xacts record read, so the old incomplete-transaction check would refuse it) and
commits after it. The install here is a re-install: a first install waits for every
transaction writing a table it adds its TRUNCATE trigger to, so no transaction that wrote a
followed table can be open across a first install at all. Decoding on Spark without a start
LSN must start at the install's message, keep only what was recorded after it, and save that
start. The segment wholly before the install (the open transaction's first row) is in no batch;
where the source has no record of the install's position (an install older than that record),
a first batch that holds no install is refused, with nothing saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.catalog.install import InstallReport, install
from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.errors import DecodingError
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.spark.job import BatchResult, decode_batch
from cdclake.stream.progress import load_progress
from tests.e2e.spark.helpers import rows, ship_to, tables_of
from tests.e2e.spark.workload import Archived, archive_current, archived

pytestmark = pytest.mark.e2e

SETUP = [
    "CREATE TABLE acct (id int PRIMARY KEY, owner text, balance int)",
    "CREATE TABLE audit (id int PRIMARY KEY, msg text)",
]


@dataclass
class Workload:
    archived: Archived
    before_install: int  #: the WAL position just before the install ran
    report: InstallReport
    open_xid: int  #: the transaction open across the install


def run_workload(pg: LocalPostgres, database: str, directory: Path) -> Workload:
    for sql in SETUP:
        pg.sql(sql, database)
    install(pg.dsn(database))  # the TRUNCATE triggers; its dictionary is not archived
    long = pg.connect(database)
    other = pg.connect(database)
    try:
        long.execute("BEGIN")
        long.execute("INSERT INTO acct VALUES (10, 'long', 10)")  # before the first WAL read
        open_xid = int(long.execute("SELECT txid_current()").fetchone()[0]) % (1 << 32)
        first = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())", database)[0][0]
        pg.sql("SELECT pg_switch_wal()", database)
        pg.sql("CHECKPOINT", database)  # its running-xacts record names the long transaction
        other.execute("INSERT INTO acct SELECT i, 'early', i FROM generate_series(1, 5) i")
        other.execute("UPDATE acct SET balance = 100 WHERE id = 1")
        pg.sql("SELECT pg_switch_wal()", database)  # the segment before holds no install
        other.execute("INSERT INTO audit VALUES (1, 'before')")
        other.execute("TRUNCATE audit")
        long.execute("INSERT INTO acct VALUES (11, 'long', 11), (12, 'long', 12)")
        long.execute("UPDATE acct SET owner = 'long before' WHERE id = 2")
        # the install in this segment: its batch holds changes recorded before it
        before = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", database)[0][0])
        report = install(pg.dsn(database))  # the install: no table lock, triggers exist
        long.execute("INSERT INTO acct VALUES (13, 'long', 13)")
        long.execute("UPDATE acct SET balance = 99 WHERE id = 10")
        long.execute("DELETE FROM acct WHERE id = 11")
        long.execute("SAVEPOINT s")
        long.execute("INSERT INTO acct VALUES (14, 'long', 14)")
        long.execute("RELEASE SAVEPOINT s")
        long.execute("COMMIT")
        other.execute("INSERT INTO acct VALUES (20, 'late', 20)")
        other.execute("UPDATE acct SET balance = 33 WHERE id = 3")
        other.execute("DELETE FROM acct WHERE id = 4")
        other.execute("INSERT INTO audit VALUES (2, 'after')")
        other.execute("TRUNCATE audit")
    finally:
        long.close()
        other.close()
    last = archive_current(pg, database)
    return Workload(archived(pg, database, str(first), last, directory), before, report,
                    open_xid)


@pytest.fixture
def workload(pg: LocalPostgres, database: str, tmp_path: Path) -> Workload:
    return run_workload(pg, database, tmp_path / "wal")


def _config(tmp_path: Path, dsn: str) -> Config:
    home = tmp_path / "spark"
    return Config(home=home, store_url=(home / "store").as_uri(), source_dsn=dsn,
                  spark_partitions=2, spill_dir=home / "spill")


def _changes(table: Any) -> list[tuple[str, int | None, Any]]:
    """(op, id, the row's other column) in stream order; a DELETE's id from its old key."""
    out = []
    for r in rows(table):
        op = r[stream.OP]
        key = r[stream.OLD_KEY]["id"] if op == stream.OP_DELETE else r["id"]
        out.append((op, key, r.get("balance", r.get("msg"))))
    return out


def test_a_new_stream_starts_at_the_install(pg: LocalPostgres, workload: Workload,
                                            tmp_path: Path, spark: Any) -> None:
    w = workload
    assert len(w.archived.segments) >= 2
    config = _config(tmp_path, pg.dsn(w.archived.database))
    ship_to(config, w.archived)
    result = decode_batch(config, spark=spark, start_lsn=None)
    # the first segment is wholly before the install: in no batch
    assert isinstance(result, BatchResult) and result.segments == w.archived.segments[1:]
    assert result.stats["cut_before_start"] > 0

    progress = load_progress(open_store(config), Layout())
    assert progress is not None
    # the message record's LSN: after where the install began, before its end
    assert w.before_install <= progress.start_lsn < w.report.dictionary_lsn
    assert progress.open_txns == []

    got = tables_of(Path(config.home) / "store" / "changes", [result.batch])
    assert set(got) == {"public.acct", "public.audit"}
    acct = rows(got["public.acct"])
    assert all(r[stream.COMMIT_LSN] > progress.start_lsn for r in acct)
    # what the open transaction wrote after the install (in the savepoint too), then the rest;
    # nothing of the rows written before the install (ids 1, 2, 5, 12, 'long before')
    assert _changes(got["public.acct"]) == [
        ("I", 13, 13), ("U", 10, 99), ("D", 11, None), ("I", 14, 14),
        ("I", 20, 20), ("U", 3, 33), ("D", 4, None)]
    assert {r[stream.XID] for r in acct[:4]} == {w.open_xid}
    assert all(r[stream.LSN] > progress.start_lsn for r in acct)
    assert [(r[stream.OP], r["msg"]) for r in rows(got["public.audit"])] == [
        ("I", "after"), ("T", None)]


def test_a_first_batch_before_any_install_is_refused(pg: LocalPostgres, workload: Workload,
                                                     tmp_path: Path, spark: Any) -> None:
    w = workload
    config = _config(tmp_path, pg.dsn(w.archived.database))
    ship_to(config, w.archived)
    store = open_store(config)
    first = w.archived.segments[0]
    # the source says where the install wrote: its segment is after the one to decode
    assert decode_batch(config, spark=spark, until_segment=first) is None
    pg.sql("DROP FUNCTION cdclake.install_message()", w.archived.database)  # an older install
    with pytest.raises(DecodingError, match=f"segments {first} hold no full dictionary") as err:
        decode_batch(config, spark=spark, until_segment=first)
    assert "cdclake source install" in str(err.value) and "--start-lsn" in str(err.value)
    assert load_progress(store, Layout()) is None
    assert [i.key for i in store.list("changes/")] == []
    assert [i.key for i in store.list("dictionary/")] == []
    # nothing was saved: the next attempt, over WAL that includes the install, starts there
    result = decode_batch(config, spark=spark)
    assert result is not None and result.segments == w.archived.segments
    progress = load_progress(store, Layout())
    assert progress is not None
    assert w.before_install <= progress.start_lsn < w.report.dictionary_lsn
