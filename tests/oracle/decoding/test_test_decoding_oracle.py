"""cdclake's test_decoding output equals a real slot's, line for line, on PostgreSQL 15 and 18."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.session import DecodeOptions, decode
from cdclake.errors import UnknownRelationError
from cdclake.local.postgres import LocalPostgres
from cdclake.wal.source import DirectorySource
from tests.oracle.decoding.harness import (
    archive_all,
    as_lines,
    capture,
    captured_once,
    diff,
    oracle,
    ours,
    prepare,
    run_steps,
)
from tests.oracle.decoding.workloads import workloads
from tests.oracle.features import skip_unless_built_with

pytestmark = pytest.mark.oracle

NAMES = [w.name for w in workloads(18)]


@pytest.mark.parametrize("name", NAMES)
def test_matches_slot(pg: LocalPostgres, name: str, tmp_path: Path,
                      request: pytest.FixtureRequest) -> None:
    w = {x.name: x for x in workloads(pg.version)}[name]
    skip_unless_built_with(pg, w.requires)
    spill = tmp_path / "spill"
    cap = captured_once(pg, name, lambda: capture(pg, request.getfixturevalue("database"),
                                                   w.steps, setup=w.setup, spill_dir=spill),
                        spill_dir=spill)
    assert cap.expected, "the workload produced no decodable change: the test would prove nothing"
    assert cap.actual == cap.expected, diff(cap.expected, cap.actual)


def test_matches_slot_when_spilling_everything(pg: LocalPostgres, database: str,
                                               tmp_path: Path) -> None:
    """With a tiny work_mem every transaction is serialized and read back at commit."""
    w = {x.name: x for x in workloads(pg.version)}["concurrent_sessions"]
    spill = tmp_path / "spill"
    cap = capture(pg, database, w.steps, setup=w.setup, spill_dir=spill, work_mem=1024)
    assert cap.result is not None and cap.result.spilled_changes > 0
    assert cap.actual == cap.expected, diff(cap.expected, cap.actual)
    assert not list(spill.rglob("*.spill")), "spill files must be removed after commit"


def test_matches_slot_over_pgbench(pg: LocalPostgres, database: str, tmp_path: Path) -> None:
    """pgbench's own initialization (TRUNCATE + COPY FREEZE, VACUUM, primary keys) and a
    serial key added by a table rewrite, then its TPC-B-like transactions."""
    cap = prepare(pg, database)
    bench = [pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]
    try:
        subprocess.run([*bench, "-i", "-q", "-s", "1", database], check=True,
                       capture_output=True)
        pg.sql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY", database)
        subprocess.run([*bench, "-c", "2", "-t", "50", "-n", database], check=True,
                       capture_output=True)
        cap.end_lsn = archive_all(pg, database)
        expected = as_lines(oracle(pg, cap))
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    actual, _ = ours(pg, cap, spill_dir=tmp_path / "spill")
    assert len(expected) > 100_000
    assert actual == expected, diff(expected, actual)


#: a rewrite: its new relfilenode is known from pg_class rows in the WAL only
ONE_REWRITE = (("a", "CREATE TABLE vf (id int PRIMARY KEY, v text)"),
               ("a", "INSERT INTO vf SELECT g, 'v' || g FROM generate_series(1, 20) g"),
               ("a", "VACUUM FULL vf"),
               ("a", "INSERT INTO vf VALUES (100, 'after vacuum full')"),
               ("a", "UPDATE vf SET v = 'updated' WHERE id = 1"))


def test_a_relfilenode_nothing_explains_stops_decoding(pg: LocalPostgres, database: str,
                                                       tmp_path: Path) -> None:
    """With the WAL pg_class tracker switched off, the rewritten table's relfilenode is
    unknown: decoding stops, naming it and where (nothing else is asked)."""
    cap = prepare(pg, database)
    try:
        run_steps(pg, database, ONE_REWRITE)
        cap.end_lsn = archive_all(pg, database)
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    options = DecodeOptions(db_oid=cap.db_oid, start_lsn=cap.start_lsn, read_from=cap.read_from,
                            end_lsn=cap.end_lsn, spill_dir=tmp_path / "spill", ddl_key=cap.key)
    with pytest.raises(UnknownRelationError, match=r"relfilenode 1663/\d+/\d+ at LSN [0-9A-F]+/"):
        decode(DirectorySource(pg.archive_dir), Dictionary(), options,
               lambda d, v: TestDecoding(lambda _line: None, d.types, version=v), tracker=None)
