"""Airflow DAG ``cdclake_maintenance``: compact the mirrors, expire old snapshots, remove
orphan files, with the stream's watermark kept (:mod:`cdclake.pipeline.maintenance`); then
the full check of every mirror (an ingest run checks only what it wrote).

Thin on purpose, like ``cdclake_ingest``: one call per task. Both take the stream's lake
lease, so they wait for (or are waited for by) an ingest run's merge.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from cdclake.config import Config
from cdclake.pipeline.maintenance import maintain
from cdclake.pipeline.steps import validate_tables


@dag(
    dag_id="cdclake_maintenance",
    description="Iceberg mirrors: rewrite data files and deletes, rewrite manifests, expire "
                "snapshots, remove orphan files",
    schedule=Config.load().maintenance_schedule,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["cdclake"],
    params={
        "tables": Param([], type=["null", "array"], items={"type": "string"},
                        description="namespace.table to maintain; empty: all"),
        "keep_snapshots": Param(None, type=["null", "integer"], minimum=1,
                                description="snapshots kept per table (default: the "
                                            "configuration's keep_snapshots)"),
        "keep_hours": Param(None, type=["null", "number"], minimum=0,
                            description="snapshots and unreferenced files younger than this "
                                        "are kept (default: keep_hours)"),
    },
)
def cdclake_maintenance() -> None:
    @task
    def maintain_tables(params: dict[str, Any] | None = None) -> dict[str, Any]:
        params = params or {}
        return maintain(Config.load(), tables=params.get("tables") or (),
                        keep_snapshots=params.get("keep_snapshots"),
                        keep_hours=params.get("keep_hours"))

    @task
    def check_mirrors() -> dict[str, Any]:
        return validate_tables(Config.load())

    maintain_tables() >> check_mirrors()


cdclake_maintenance()
