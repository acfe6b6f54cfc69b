"""Airflow DAG ``cdclake_ingest``: ship → snapshot → decode → validate stream → merge → validate
tables → report, one batch per run.

Thin on purpose: every task is one call into :mod:`cdclake.pipeline` with the configuration
(``CDCLAKE_*`` / ``CDCLAKE_CONFIG``) and the run's params; all logic, and what makes each
task safe to retry, lives there. The Spark steps (the snapshot when it has tables to copy,
the decode, the merge when ``merge_engine`` is spark) are submitted through the Airflow
Spark provider on the ``spark_default`` connection (:mod:`cdclake.pipeline.submit`), with
cdclake shipped to the executors. One active run at a time: two runs would decode the same
segments and race on the mirrors.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from cdclake import pipeline
from cdclake.config import Config
from cdclake.pipeline.submit import submit


def _args(params: dict[str, Any] | None) -> tuple[Config, pipeline.RunParams]:
    return Config.load(), pipeline.RunParams.from_mapping(params)


@dag(
    dag_id="cdclake_ingest",
    description="PostgreSQL WAL archive -> change stream (Spark) -> Iceberg mirrors, checked by GX",
    schedule=Config.load().schedule,
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    tags=["cdclake"],
    params={
        "start_lsn": Param(None, type=["null", "string"],
                           description="a new stream's first batch only: emit transactions "
                                       "committing at or after this LSN"),
        "end_lsn": Param(None, type=["null", "string"],
                         description="decode no further than the segment holding this LSN "
                                     "(e.g. 0/5000000); empty: everything archived"),
        "until_segment": Param(None, type=["null", "string"],
                               description="decode no further than this WAL segment "
                                           "(inclusive, e.g. 000000010000000000000005)"),
        "tables": Param([], type=["null", "array"], items={"type": "string"},
                        description="schema.table to merge now; empty: all (the others "
                                    "catch up on the next run)"),
        "snapshot_tables": Param([], type=["null", "array"], items={"type": "string"},
                                 description="schema.table to snapshot again (their mirrors "
                                             "are replaced by the source's current rows); "
                                             "tables without a mirror are snapshotted anyway"),
        "dry_run": Param(False, type=["null", "boolean"],
                         description="plan and check only: upload, write and commit nothing"),
    },
)
def cdclake_ingest() -> None:
    @task
    def ship(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return pipeline.ship(*_args(params))

    @task
    def snapshot(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return submit("snapshot", Config.load(), params)

    @task
    def decode(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return submit("decode", Config.load(), params)

    @task
    def validate_stream(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return pipeline.validate_stream(*_args(params))

    @task
    def merge(params: dict[str, Any] | None = None) -> dict[str, Any]:
        return submit("merge", Config.load(), params)

    @task
    def validate_tables(merged: dict[str, Any],
                        params: dict[str, Any] | None = None) -> dict[str, Any]:
        return pipeline.validate_tables(*_args(params), merged)

    @task
    def report(results: dict[str, Any], params: dict[str, Any] | None = None,
               run_id: str | None = None) -> dict[str, Any]:
        out = pipeline.report(*_args(params), results, run_id=run_id)
        pipeline.raise_for_failed_tables(results)  # a table's failed merge fails the run
        return out

    shipped, copied, decoded = ship(), snapshot(), decode()
    checked, merged = validate_stream(), merge()
    validated = validate_tables(merged)
    shipped >> copied >> decoded >> checked >> merged
    report({"ship": shipped, "snapshot": copied, "decode": decoded, "validate_stream": checked,
            "merge": merged, "validate_tables": validated})


cdclake_ingest()
