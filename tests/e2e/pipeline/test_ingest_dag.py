"""The ``cdclake_ingest`` DAG end to end: PostgreSQL 15 → archive directory → ship to S3 (moto
over HTTP) → decode → GX → Iceberg (SQLite catalog) → read back with DuckDB.

The tests run in order on one source and one lake, like a stream's life: a first batch, a
second with every kind of change (updates with key changes and unchanged TOAST, deletes,
TRUNCATE, ADD COLUMN), a run with nothing new, then a merge killed between two table commits
and the run that heals it, and the maintenance DAG on what they wrote. After each, every
mirror must equal its source table row for row, read by an Iceberg reader cdclake did not
write.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lsn import parse_lsn
from tests.support import duck

from .conftest import DAGS, Source

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = ("public.accounts", "public.events", "public.tags")
KEYS = {"public.accounts": "id", "public.events": "id", "public.tags": None}


# -- helpers ------------------------------------------------------------------------------------


def archive_all(source: Source, timeout: float = 60.0) -> None:
    """Close the current segment and wait until the archiver copied it."""
    source.pg.archive_current_segment(source.database, timeout)


def normal(value: Any) -> Any:
    """One representation per value across psycopg and DuckDB."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def source_rows(source: Source, table: str) -> list[dict[str, Any]]:
    with source.pg.connect(source.database) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description or ()]
        rows = [{n: normal(v) for n, v in zip(names, r, strict=True)} for r in cur.fetchall()]
    return sorted(rows, key=duck.natural)


def mirror_rows(config: Config, table: str) -> list[dict[str, Any]]:
    from cdclake.lake.catalog import open_catalog

    schema, name = table.split(".")
    iceberg = open_catalog(config).load_table((config.namespace, f"{schema}__{name}"))
    rows = duck.read_table(iceberg).to_pylist()
    rows = [{k: normal(v) for k, v in r.items() if not k.startswith("_cdc_")} for r in rows]
    return sorted(rows, key=duck.natural)


def assert_mirrors_equal(source: Source, config: Config) -> None:
    for table in TABLES:
        expected, actual = source_rows(source, table), mirror_rows(config, table)
        assert actual == expected, f"mirror of {table} differs from the source"


def snapshots(config: Config) -> dict[str, int | None]:
    from cdclake.lake.catalog import open_catalog

    catalog = open_catalog(config)
    out = {}
    for table in TABLES:
        schema, name = table.split(".")
        snap = catalog.load_table((config.namespace, f"{schema}__{name}")).current_snapshot()
        out[table] = snap.snapshot_id if snap else None
    return out


def run_dag(airflow_home: Path, dag_id: str = "cdclake_ingest", **conf: Any) -> Any:
    """One ``dag.test()`` run of the DAG as the dags folder defines it; its final DagRun."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.dags[dag_id]
    for task in dag.tasks:  # a failure must fail the test now, not a minute later
        task.retries = 0
    run = dag.test(run_conf=conf or None)
    if run.state != "success":
        logs = sorted((airflow_home / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)
        tail = logs[-1].read_text()[-6000:] if logs else "(no task log)"
        pytest.fail(f"DAG run ended {run.state}; last task log:\n{tail}")
    return run


@pytest.fixture(scope="module")
def lake_state() -> Iterator[dict[str, Any]]:
    yield {}


# -- the DAG file ---------------------------------------------------------------------------------


def test_dag_folder_imports_and_declares_the_pipeline(airflow_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    dag = bag.dags["cdclake_ingest"]
    assert dag.max_active_runs == 1
    assert dag.schedule == Config().schedule == "*/10 * * * *"
    assert set(dag.params.keys()) == {"start_lsn", "end_lsn", "until_segment", "tables",
                                      "snapshot_tables", "dry_run"}
    # every parameter is optional: the trigger form marks "required" a field whose type does
    # not admit null (Airflow's UI: a schema type that is not a list holding "null")
    for each in bag.dags.values():
        for name, param in each.params.items():
            kinds = param.schema.get("type")
            assert isinstance(kinds, list) and "null" in kinds, (each.dag_id, name, kinds)
    order = ["ship", "snapshot", "decode", "validate_stream", "merge", "validate_tables",
             "report"]
    assert {t.task_id for t in dag.tasks} == set(order)
    for before, after in itertools.pairwise(order):
        assert before in dag.get_task(after).upstream_task_ids


# -- a stream's life ---------------------------------------------------------------------------


def test_first_batch_then_every_kind_of_change(airflow_home: Path, source: Source,
                                               cdclake_env: Config,
                                               lake_state: dict[str, Any]) -> None:
    config = cdclake_env
    for sql in PHASE_1:
        source.sql(sql)
    archive_all(source)
    run_dag(airflow_home)
    assert_mirrors_equal(source, config)
    assert len(mirror_rows(config, "public.accounts")) == 40

    for sql in PHASE_2:
        source.sql(sql)
    archive_all(source)
    run_dag(airflow_home)
    assert_mirrors_equal(source, config)
    # the new column arrived, and the TOASTed notes the updates did not touch are intact
    assert "region" in mirror_rows(config, "public.events")[0]
    notes = {r["id"]: r["note"] for r in mirror_rows(config, "public.accounts")}
    assert all(len(n) > 4000 for i, n in notes.items() if i in (2, 4, 6))

    report = sorted((config.reports_path() / "runs").glob("*.json"))
    assert len(report) == 2
    assert (config.reports_path() / "data_docs" / "index.html").exists()
    lake_state["snapshots"] = snapshots(config)


def test_a_run_with_nothing_new_commits_nothing(airflow_home: Path, source: Source,
                                                cdclake_env: Config,
                                                lake_state: dict[str, Any]) -> None:
    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.watermark import merged_end_lsn

    config = cdclake_env
    before = merged_end_lsn(open_catalog(config), config.namespace, config.stream)
    run_dag(airflow_home)
    assert snapshots(config) == lake_state["snapshots"]
    assert merged_end_lsn(open_catalog(config), config.namespace, config.stream) == before
    assert_mirrors_equal(source, config)


def test_tables_whose_merge_failed_after_another_committed_are_healed_by_the_next_run(
        airflow_home: Path, source: Source, cdclake_env: Config,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cdclake import pipeline
    from cdclake.lake.arrowmerge import ArrowMerge

    config = cdclake_env
    for sql in PHASE_3:
        source.sql(sql)
    archive_all(source)
    pipeline.ship(config)
    decoded = pipeline.decode(config)
    assert decoded["batch"] is not None
    assert set(decoded["tables"]) >= {"public.accounts", "public.events"}
    pipeline.validate_stream(config)

    real = ArrowMerge.merge_table
    committed: list[str] = []

    def fail_after_first_commit(*args: Any, **kwargs: Any) -> Any:
        if committed:
            raise LakeError("this table's merge failed after another table committed")
        result = real(*args, **kwargs)
        committed.append(result.table)
        return result

    monkeypatch.setattr(ArrowMerge, "merge_table", fail_after_first_commit)
    merged = pipeline.merge(config)  # one table never stops the others: each is reported
    monkeypatch.setattr(ArrowMerge, "merge_table", real)

    first = committed[0]
    others = [t for t in TABLES if t != first and t in decoded["tables"]]
    assert sorted({f["table"] for f in merged["failed"]}) == sorted(others)
    with pytest.raises(LakeError, match=r"the merge of \d table\(s\) failed: .*the other "
                                        r"tables committed, and the next run retries them"):
        pipeline.raise_for_failed_tables({"merge": merged})
    assert mirror_rows(config, first) == source_rows(source, first)
    assert any(mirror_rows(config, t) != source_rows(source, t) for t in others)
    end = parse_lsn(decoded["end_lsn"])
    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.watermark import merged_end_lsn

    assert merged_end_lsn(open_catalog(config), config.namespace, config.stream) < end

    # the next scheduled run decodes nothing new, but merges the batch the crash left
    run_dag(airflow_home)
    assert_mirrors_equal(source, config)
    assert merged_end_lsn(open_catalog(config), config.namespace, config.stream) == end


def test_the_maintenance_dag_keeps_the_mirrors_exact_and_their_watermarks(
        airflow_home: Path, source: Source, cdclake_env: Config) -> None:
    """The maintenance DAG on the mirrors the runs above wrote: it compacts them, keeps each
    watermark and checks every mirror whole. (The DAG on the Spark merge is run through the
    Spark provider to a standalone master in test_standalone_cluster.py, and maintenance of
    the Spark merge's position deletes after it.)"""
    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.tables import mirror_identifier
    from cdclake.lake.watermark import committed_lsn

    config = cdclake_env

    def watermarks() -> dict[str, Any]:
        catalog = open_catalog(config)
        return {t: committed_lsn(catalog.load_table(mirror_identifier(config, *t.split("."))),
                                 config.stream) for t in TABLES}

    before = watermarks()
    run = run_dag(airflow_home, "cdclake_maintenance", keep_hours=0)
    assert run.state == "success"
    assert_mirrors_equal(source, config)
    assert watermarks() == before


# -- the workload --------------------------------------------------------------------------------

BIG_NOTE = "SELECT string_agg(md5(g::text || {seed}), '') FROM generate_series(1, 200) g"

PHASE_1 = [
    f"""INSERT INTO accounts SELECT i, 'owner ' || i, i * 10.25,
        CASE WHEN i % 2 = 0 THEN ({BIG_NOTE.format(seed="i")}) ELSE 'short ' || i END,
        timestamptz '2025-01-01 00:00:00+00' + i * interval '1 hour'
        FROM generate_series(1, 40) i""",
    "INSERT INTO events SELECT i, 'kind-' || (i % 3), i / 4.0 FROM generate_series(1, 30) i",
    "INSERT INTO tags VALUES ('red', 1), ('red', 1), ('blue', 2), ('green', 3)",
]

PHASE_2 = [
    # unchanged TOAST: balance only, notes stay out of line and are not logged
    "UPDATE accounts SET balance = balance + 1 WHERE id IN (2, 4, 6, 7)",
    # key changes, one of them of a row with a TOASTed note
    "UPDATE accounts SET id = id + 1000 WHERE id IN (8, 9)",
    "BEGIN; UPDATE accounts SET owner = 'renamed' WHERE id = 10; "
    "UPDATE accounts SET id = 2000, owner = 'moved twice' WHERE id = 10; COMMIT",
    "DELETE FROM accounts WHERE id BETWEEN 30 AND 35",
    "UPDATE accounts SET note = NULL WHERE id = 12",
    "INSERT INTO accounts VALUES (500, 'late', NULL, 'tiny', NULL)",
    "TRUNCATE events",
    "INSERT INTO events SELECT i, 'after-truncate', i FROM generate_series(100, 110) i",
    "ALTER TABLE events ADD COLUMN region text",
    "INSERT INTO events VALUES (200, 'with-region', 1.5, 'eu-west')",
    "UPDATE events SET region = 'us-east' WHERE id IN (100, 101)",
    "DELETE FROM tags WHERE ctid = (SELECT min(ctid) FROM tags WHERE tag = 'red')",
    "UPDATE tags SET weight = 20 WHERE tag = 'blue'",
]

PHASE_3 = [
    "UPDATE accounts SET balance = 0 WHERE id < 5",
    "INSERT INTO accounts VALUES (600, 'crash test', 6, 'x', now())",
    "UPDATE events SET kind = 'changed' WHERE id > 105",
    "DELETE FROM events WHERE id = 100",
    "INSERT INTO tags VALUES ('violet', 7)",
    "UPDATE accounts SET balance = balance * 2 WHERE id % 3 = 0",
    "UPDATE accounts SET id = id + 5000 WHERE id = 11",
    "DELETE FROM accounts WHERE id = 13",
    "INSERT INTO accounts VALUES (700, 'late', 7, 'a new key', now())",
    "UPDATE events SET amount = amount + 1",
    "DELETE FROM tags WHERE tag = 'violet'",
]
