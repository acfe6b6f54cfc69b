"""The pipeline oracle with ``merge_engine = "spark"``: column type changes on mirrors that
exist (workloads.column_type_changes), decoded and merged on one Spark session with Iceberg's
runtime. Each table goes through a MERGE INTO, or, for a batch with a type change no Iceberg
promotion holds (or a rewrite, a ``time`` column, ...), through the pyiceberg merge, whose
commit replaces the column with its new values; later batches MERGE into the replaced fields.
The stream equals a slot's, every mirror (DuckDB) its table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.local.postgres import LocalPostgres
from cdclake.pipeline.steps import MERGE_TASKS
from cdclake.spark import job
from cdclake.sparkenv.session import session as spark_session
from tests.oracle.decoding.workloads import column_type_changes
from tests.oracle.pipeline.harness import run_workload
from tests.oracle.pipeline.test_pipeline_oracle import check

pytestmark = pytest.mark.oracle


@pytest.fixture
def lake_spark(pg: LocalPostgres, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A session reading and writing the catalog of the run in ``tmp_path`` (its catalog is
    fixed when the session starts, so it is one per test), and that directory."""
    config = Config(home=tmp_path / "home", spark_master="local[2]", spark_partitions=2)
    open_catalog(config)  # Spark reads the catalog's tables; pyiceberg creates them
    session = spark_session(config, "test", tasks=(job.__name__, *MERGE_TASKS))
    yield session, tmp_path
    session.stop()


# the engine's choices do not depend on the server's version, which the pyiceberg oracle covers
@pytest.mark.parametrize("pg", [15], indirect=True)
def test_column_type_changes_merged_on_spark(pg: LocalPostgres, database: str,
                                             lake_spark: tuple[Any, Path]) -> None:
    spark, work = lake_spark
    w = column_type_changes()
    run = run_workload(pg, database, w.steps, spark, work, setup=w.setup, mirrors_first=True,
                       merge_engine="spark")
    check(pg, run)
    tables = [t for m in run.merges for b in m["batches"] for t in b["tables"]]
    assert {t["engine"] for t in tables} == {"spark", "pyiceberg"}, "one engine did it all"
    retyped = [t for t in tables if t["fallback"].startswith("column ")]
    assert any("which Iceberg cannot promote" in t["fallback"] for t in retyped)
