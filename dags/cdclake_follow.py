"""Airflow DAG ``cdclake_follow``: the low-latency way to run cdclake from Airflow — one
long-lived Spark application runs every step whenever new segments are archived
(:func:`cdclake.pipeline.follow.follow_for`, as ``cdclake run --follow`` does), for
``CDCLAKE_FOLLOW_FOR`` seconds (default an hour); the continuous schedule then starts the
next one at once.

Thin on purpose, like ``cdclake_ingest``: one task, one call. Use it instead of
``cdclake_ingest``, not beside it: the follower holds the stream's decode lease, so an ingest
run's decode waits ``CDCLAKE_LEASE_WAIT`` seconds for it and then fails naming it. Paused when
first seen, like every DAG: unpause it to start following.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from cdclake.config import Config
from cdclake.pipeline.submit import submit


@dag(
    dag_id="cdclake_follow",
    description="PostgreSQL WAL archive -> Iceberg mirrors within seconds: one Spark "
                "application follows the archive",
    schedule="@continuous",
    start_date=datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 3, "retry_delay": timedelta(seconds=30)},
    tags=["cdclake"],
)
def cdclake_follow() -> None:
    @task
    def follow() -> dict[str, Any]:
        return submit("follow", Config.load())

    follow()


cdclake_follow()
