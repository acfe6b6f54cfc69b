"""The lake is exact: every decoding-oracle workload through ship -> Spark decode -> merge.

Two oracles, both PostgreSQL's own: the change stream, rendered as ``test_decoding`` lines,
equals a slot's output line for line (messages aside: the stream carries table changes only);
and every mirror, read with DuckDB, equals its source table row for row. A table whose replica
identity makes its UPDATE/DELETE unappliable (NOTHING, or DEFAULT without a key) is reported
by the merge; that is the only difference accepted.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from cdclake.local.postgres import LocalPostgres
from tests.oracle.decoding.harness import diff, login_role
from tests.oracle.decoding.workloads import (
    OWNER,
    column_type_changes,
    owner_truncates,
    workloads,
)
from tests.oracle.features import skip_unless_built_with
from tests.oracle.pipeline.harness import (
    PipelineRun,
    compare_mirrors,
    describe,
    run_action,
    run_workload,
)

pytestmark = pytest.mark.oracle

NAMES = [w.name for w in workloads(18)]
#: workloads that change no table (logical messages only): the stream must be empty too
NO_TABLE_CHANGES = frozenset({"messages"})


def check(pg: LocalPostgres, run: PipelineRun, *, changes: bool = True) -> None:
    if changes:
        assert run.expected, "the workload changed no table: the test would prove nothing"
    assert run.actual == run.expected, diff(run.expected, run.actual)
    diffs, _unappliable = compare_mirrors(pg, run)
    wrong = [d for d in diffs if not d.accepted]
    assert not wrong, describe(wrong)


@pytest.mark.parametrize("name", NAMES)
def test_pipeline_matches_postgres(pg: LocalPostgres, database: str, name: str,
                                   tmp_path: Path, spark: Any) -> None:
    w = {x.name: x for x in workloads(pg.version)}[name]
    skip_unless_built_with(pg, w.requires)
    run = run_workload(pg, database, w.steps, spark, tmp_path, setup=w.setup)
    check(pg, run, changes=name not in NO_TABLE_CHANGES)


#: workloads whose DDL (ALTER, rewrites, type changes, VACUUM FULL, partitions attached and
#: detached) also runs on mirrors an earlier run made
DDL_WORKLOADS = ["alter_table", "add_serial_key_rewrite", "vacuum_full_cluster", "partitions",
                 "type_ddl"]


@pytest.mark.parametrize("name", DDL_WORKLOADS)
def test_pipeline_matches_postgres_with_mirrors_before_the_ddl(
        pg: LocalPostgres, database: str, name: str, tmp_path: Path, spark: Any) -> None:
    """The tables are created and filled, and that batch merged, before the workload's
    first DDL runs: the DDL meets mirrors that exist, as in production (a workload run in
    one go creates each mirror with its table's last schema)."""
    w = {x.name: x for x in workloads(pg.version)}[name]
    run = run_workload(pg, database, w.steps, spark, tmp_path, setup=w.setup,
                       mirrors_first=True)
    assert run.merges[0]["tables"], "the first run made no mirror: the test would prove less"
    check(pg, run)


def test_column_type_changes_on_mirrors_that_exist(pg: LocalPostgres, database: str,
                                                   tmp_path: Path, spark: Any) -> None:
    """Issue 33: ``ALTER COLUMN n TYPE int USING n::int`` on a table whose mirror exists, and
    every other kind of type change (workloads.column_type_changes). Each column whose type
    Iceberg cannot promote is replaced by a new field in the commit that writes its values of
    the new type — the rewrite's rows, or, where PostgreSQL keeps the stored bytes, the
    stored values as it reads them now — and every mirror equals its table."""
    w = column_type_changes()
    run = run_workload(pg, database, w.steps, spark, tmp_path, setup=w.setup,
                       mirrors_first=True)
    check(pg, run)
    later = [t for m in run.merges[1:] for b in m["batches"] for t in b["tables"]]
    replaced = {(t["table"], c) for t in later for c in t["schema_changes"]}
    assert ("public.rw", "replace column n by a new field n int (attnum 2)") in replaced
    assert ("public.keyed", "replace column code by a new field code int (attnum 1)") in replaced
    # no rewrite: the stored values were converted, every row written again
    loose = next(t for t in later if t["table"] == "public.loose")
    assert loose["strategy"] == "full-rewrite"
    assert "replace column amount by a new field amount string (attnum 2)" in \
        loose["schema_changes"]


#: the user's report: small transactions with savepoints (rolled back and released, updates
#: and inserts after them, a row lock taken inside one) in four sessions while a fifth holds a
#: large transaction open, updating as it goes, and commits last
def _savepoints_beside_a_long_transaction() -> list[tuple[str, str]]:
    steps = [("setup", "CREATE TABLE acct (id int PRIMARY KEY, owner text, n int)"),
             ("setup", "CREATE TABLE ledger (id int PRIMARY KEY, acct int, amount int)"),
             ("setup", "CREATE TABLE big (id int PRIMARY KEY, v text)"),
             ("setup", "INSERT INTO acct SELECT g, 'o' || g, 0 FROM generate_series(1, 40) g"),
             ("long", "BEGIN"),
             ("long", "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 30000) g")]
    for rnd in range(3):
        for s in range(4):
            sess = f"s{s}"
            a = rnd * 4 + s + 1
            lid = 1000 * (rnd + 1) + s * 10
            steps += [
                (sess, "BEGIN"),
                (sess, f"UPDATE acct SET n = n + 1 WHERE id = {a}"),
                (sess, "SAVEPOINT p1"),
                (sess, f"SELECT * FROM acct WHERE id = {a + 20} FOR UPDATE"),
                (sess, f"UPDATE acct SET n = n + 10 WHERE id = {a + 20}"),
                (sess, f"INSERT INTO ledger VALUES ({lid}, {a}, 1), ({lid + 1}, {a}, 2)"),
                (sess, "SAVEPOINT p2"),
                (sess, f"INSERT INTO ledger VALUES ({lid + 2}, {a}, 3)"),
                (sess, "ROLLBACK TO SAVEPOINT p2"),
                (sess, f"INSERT INTO ledger VALUES ({lid + 3}, {a}, 4)"),
                (sess, "RELEASE SAVEPOINT p1"),
                (sess, f"DELETE FROM ledger WHERE id = {lid}"),
                ("long", f"UPDATE big SET v = 'round {rnd} session {s}' WHERE id % 1000 = {a}"),
                (sess, "COMMIT"),
            ]
    steps += [("long", "UPDATE big SET v = 'last' WHERE id <= 10"), ("long", "COMMIT")]
    return steps


def test_savepoints_beside_a_long_transaction(pg: LocalPostgres, database: str,
                                              tmp_path: Path, spark: Any) -> None:
    run = run_workload(pg, database, _savepoints_beside_a_long_transaction(), spark, tmp_path,
                       batches=4)
    assert run.cut_open > 0, "no transaction was open at a batch cut: the test proves less"
    assert run.spilled > 0, "no partition spilled: the test proves less"
    check(pg, run)


def test_materialized_view_refreshes(pg: LocalPostgres, database: str, tmp_path: Path,
                                     spark: Any) -> None:
    """REFRESH MATERIALIZED VIEW (not CONCURRENTLY) rewrites the view: no change reaches a
    slot, but the mirror must show the view's new rows (and none of the old)."""
    steps = [("a", "CREATE TABLE base (id int PRIMARY KEY, v text)"),
             ("a", "INSERT INTO base SELECT g, 'v' || g FROM generate_series(1, 20) g"),
             ("a", "CREATE MATERIALIZED VIEW evens AS SELECT id, v FROM base WHERE id % 2 = 0"),
             ("a", "UPDATE base SET v = 'changed' WHERE id <= 6"),
             ("a", "REFRESH MATERIALIZED VIEW evens"),
             ("a", "DELETE FROM base WHERE id > 10"),
             ("a", "INSERT INTO base VALUES (100, 'new')"),
             ("a", "BEGIN"), ("a", "REFRESH MATERIALIZED VIEW evens"),
             ("a", "UPDATE base SET v = 'after refresh' WHERE id = 2"), ("a", "COMMIT")]
    run = run_workload(pg, database, steps, spark, tmp_path)
    rewritten = sum(t.get("rewritten", 0) for m in run.merges for b in m["batches"]
                    for t in b["tables"])
    assert rewritten > 0, "no rewrite row reached the merge: the test proves nothing"
    check(pg, run)


def test_table_rewrites_with_toast_and_partitions(pg: LocalPostgres, database: str,
                                                  tmp_path: Path, spark: Any) -> None:
    """ALTER TABLE rewrites whose new values no change carries: a volatile default over
    TOASTed rows (then a key change leaving the TOASTed value unchanged), and a USING
    expression rewriting every leaf of a partitioned table."""
    steps = [
        ("a", "CREATE TABLE docs (id int PRIMARY KEY, body text)"),
        ("a", "ALTER TABLE docs ALTER body SET STORAGE EXTERNAL"),
        ("a", "INSERT INTO docs SELECT g, repeat(md5(g::text), 3000) FROM generate_series(1, 5) g"),
        ("a", "ALTER TABLE docs ADD COLUMN r float8 DEFAULT random()"),
        ("a", "UPDATE docs SET id = 100 WHERE id = 1"),
        ("a", "CREATE TABLE parts (id int, k int, v text, PRIMARY KEY (id, k)) "
              "PARTITION BY RANGE (k)"),
        ("a", "CREATE TABLE parts_lo PARTITION OF parts FOR VALUES FROM (0) TO (10)"),
        ("a", "CREATE TABLE parts_hi PARTITION OF parts FOR VALUES FROM (10) TO (20)"),
        ("a", "INSERT INTO parts SELECT g, g, 'value ' || g FROM generate_series(1, 19) g"),
        ("a", "BEGIN"),
        ("a", "UPDATE parts SET v = 'before the rewrite' WHERE id = 3"),
        ("a", "ALTER TABLE parts ALTER COLUMN v TYPE varchar(40) USING upper(v)"),
        ("a", "INSERT INTO parts VALUES (20, 5, 'after the rewrite')"),
        ("a", "COMMIT"),
    ]
    run = run_workload(pg, database, steps, spark, tmp_path)
    check(pg, run)


def test_a_table_owner_truncating_without_the_trigger(pg: LocalPostgres, database: str,
                                                      tmp_path: Path, spark: Any) -> None:
    """The owner of tables drops or disables the TRUNCATE triggers on them and truncates
    them every way (workloads.owner_truncates): every batch still decodes, each truncated
    mirror holds what its table holds, and the others are untouched."""
    owner = login_role(pg, database)
    run = run_workload(pg, database, owner_truncates(), spark, tmp_path, roles={OWNER: owner})
    check(pg, run)


def test_pgbench(pg: LocalPostgres, database: str, tmp_path: Path, spark: Any) -> None:
    """pgbench's initialization (COPY FREEZE, VACUUM, keys added afterwards) and its
    TPC-B-like transactions from two clients, then a serial key added by a table rewrite."""
    bench = [pg.tool("pgbench"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres"]

    def act() -> None:
        subprocess.run([*bench, "-i", "-q", "-s", "1", database], check=True,
                       capture_output=True)
        pg.sql("SELECT pg_switch_wal()", database)
        subprocess.run([*bench, "-c", "2", "-t", "100", "-n", database], check=True,
                       capture_output=True)
        pg.sql("ALTER TABLE pgbench_history ADD COLUMN id bigserial PRIMARY KEY", database)
        subprocess.run([*bench, "-c", "2", "-t", "20", "-n", database], check=True,
                       capture_output=True)

    run = run_action(pg, database, act, spark, tmp_path, batches=4)
    assert len(run.expected) > 100_000
    check(pg, run)
