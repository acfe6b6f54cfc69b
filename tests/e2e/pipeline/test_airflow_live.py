"""The ``cdclake_ingest`` DAG in a real Airflow, not ``dag.test()``: api-server, scheduler
(LocalExecutor) and DAG processor as separate processes, driven through the REST API, then
looked at in the UI with headless Chromium.

What only a live Airflow checks: the DAG processor parses the dags folder; the configuration
reaches task processes through their environment (``CDCLAKE_*``), not through this process;
the run's params travel from the REST call through the scheduler and the execution API to
:mod:`cdclake.pipeline`; every task runs in a fresh process (its own Spark session, its
XComs serialised in between) with the DAG's retries in force; and the UI renders the run and
the trigger form from what the DAG declares. Same source and lake as test_ingest_dag.py:
PostgreSQL 15 → archive → S3 (moto over HTTP) → Spark → Iceberg (SQLite catalog), and the
mirrors read back with DuckDB must equal the source.

The screenshots are kept under ``.cdclake/test-artifacts/airflow-live/`` (with the Airflow
logs, if the test failed); the test prints where.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive.command import store_env
from cdclake.config import Config
from cdclake.lsn import is_segment_name
from cdclake.pipeline.steps import safe_run_id

from .airflow_live import Chromium, LiveAirflow, find_chromium, install_chromium, port_is_open
from .conftest import DAGS, REPO, Source
from .test_ingest_dag import (
    PHASE_1,
    PHASE_2,
    TABLES,
    archive_all,
    assert_mirrors_equal,
    mirror_rows,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(360)]

DAG_ID = "cdclake_ingest"
TASKS = ("ship", "snapshot", "decode", "validate_stream", "merge", "validate_tables", "report")
PARAMS = ("start_lsn", "end_lsn", "until_segment", "tables", "snapshot_tables", "dry_run")
#: the DAG's default_args (dags/cdclake_ingest.py): a first try plus two retries
RETRIES = 2
ARTIFACTS = REPO / ".cdclake" / "test-artifacts" / "airflow-live"
FOLLOW_DAG = "cdclake_follow"
FOLLOW_FOR = 45


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium (infra/bootstrap.sh installs it); installed now if it is missing and
    this user can. Skips only when it can be neither found nor installed."""
    binary = find_chromium()
    if binary is None:
        binary, why = install_chromium()
        if binary is None:
            pytest.skip(f"headless Chromium is needed to check the Airflow UI, is not "
                        f"installed, and cannot be installed here: {why}")
    return binary


@pytest.fixture(scope="module")
def artifacts() -> Path:
    out = ARTIFACTS / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    out.mkdir(parents=True)
    return out


@pytest.fixture(scope="module")
def airflow(config: Config, tmp_path_factory: pytest.TempPathFactory, artifacts: Path,
            request: pytest.FixtureRequest) -> Iterator[LiveAirflow]:
    """Airflow with the same cdclake settings as the in-process tests, given to its
    processes as CDCLAKE_* variables (what a deployment does); one for the module. Its logs
    join the screenshots if a test failed."""
    env = {**store_env(config), "CDCLAKE_HOME": str(config.home),
           "CDCLAKE_ARCHIVE_DIR": str(config.archive_dir),
           "CDCLAKE_SOURCE_DSN": config.source_dsn,
           # the follow DAG's application follows for FOLLOW_FOR seconds, looking every 1 s
           "CDCLAKE_FOLLOW_FOR": str(FOLLOW_FOR), "CDCLAKE_FOLLOW_POLL": "1"}
    assert Config.load(env=env) == config.replace(follow_for=FOLLOW_FOR, follow_poll=1.0)
    live = LiveAirflow.start(tmp_path_factory.mktemp("airflow"), DAGS, env)
    failures = request.session.testsfailed
    try:
        yield live
    finally:
        try:
            if request.session.testsfailed > failures:
                keep = artifacts / "airflow-logs"
                keep.mkdir(exist_ok=True)
                for log in live.home.glob("*.log"):
                    shutil.copy2(log, keep / log.name)
                if (live.home / "logs").is_dir():
                    shutil.copytree(live.home / "logs", keep / "tasks", dirs_exist_ok=True)
        finally:
            live.stop()
        assert not port_is_open(live.port), f"port {live.port} still open after the stop"


def last_archived_segment(source: Source) -> str:
    return max(p.name for p in source.pg.archive_dir.iterdir() if is_segment_name(p.name))


def test_a_live_airflow_runs_the_dag_with_params_and_shows_it(
        chromium: str, source: Source, config: Config, airflow: LiveAirflow,
        artifacts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    for sql in PHASE_1:
        source.sql(sql)
    archive_all(source)
    segment = last_archived_segment(source)

    dag = airflow.wait_for_dag(DAG_ID, timeout=120)
    assert dag["is_paused"], "a new DAG starts paused (dags_are_paused_at_creation)"
    assert sorted(p for p in airflow.call("GET", f"/api/v2/dags/{DAG_ID}/details")["params"]) \
        == sorted(PARAMS)
    assert airflow.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})["is_paused"] \
        is False

    # params that change nothing in the outcome but must arrive: they land in the report
    conf: dict[str, Any] = {"start_lsn": None, "end_lsn": None, "until_segment": segment,
                            "tables": list(TABLES), "snapshot_tables": [], "dry_run": False}
    run_id = f"live__{uuid.uuid4().hex[:12]}"
    run = airflow.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                       {"dag_run_id": run_id, "logical_date": None, "conf": conf})
    assert (run["dag_run_id"], run["run_type"], run["conf"]) == (run_id, "manual", conf)
    ended = airflow.wait_for_run(DAG_ID, run_id, timeout=200)
    instances = airflow.task_instances(DAG_ID, run_id)
    if ended["state"] != "success":
        pytest.fail(f"DAG run {run_id} ended {ended['state']}; tasks: "
                    f"{airflow.task_states(DAG_ID, run_id)}\n{airflow.diagnostics()}")
    ran = time.monotonic() - started

    assert {t["task_id"]: t["state"] for t in instances} == dict.fromkeys(TASKS, "success")
    # the real run had its retries: try 1 of at most 1 + RETRIES
    assert {t["task_id"]: t["max_tries"] for t in instances} == dict.fromkeys(TASKS, RETRIES)
    retried = {t["task_id"]: t["try_number"] for t in instances if t["try_number"] != 1}
    # the scheduler started no run of its own (use_job_schedule off): this one did it all
    assert [r["dag_run_id"] for r in
            airflow.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["dag_runs"]] == [run_id]

    assert_mirrors_equal(source, config)
    assert len(mirror_rows(config, "public.accounts")) == 40
    report = json.loads((config.reports_path() / "runs" / f"{safe_run_id(run_id)}.json")
                        .read_text())
    assert report["params"] == conf
    assert report["run_id"] == safe_run_id(run_id)

    # -- the UI, in a real browser -------------------------------------------------------
    browser = Chromium(chromium, tmp_path / "chromium-profile", tmp_path / "chromium.log",
                       width=1600, height=1100)
    try:
        browser.goto(f"{airflow.url}/dags/{DAG_ID}/runs/{run_id}")
        browser.wait_for_text([DAG_ID, run_id, *TASKS])
        # the run's badge and one per task instance: the grid and the list are rendered
        browser.wait_for(f"document.body.innerText.split('Success').length > {len(TASKS) + 1}",
                         "run and task instances shown as successful")
        grid = artifacts / "dag-run-grid.png"
        grid_stats = browser.picture_stats(browser.screenshot(grid))

        browser.goto(f"{airflow.url}/dags/{DAG_ID}")
        button = "document.querySelector('[data-testid=trigger-dag-button]')"
        browser.wait_for(f"!!{button}", "Trigger button on the DAG page")
        browser.evaluate(f"{button}.click()")
        browser.wait_for_text([f"Trigger Dag - {DAG_ID}", "Run Parameters", *PARAMS,
                               "decode no further than this WAL segment"])
        # the form accepts the DAG's defaults: an operator can trigger it as it stands
        submit = "document.querySelector('[data-testid=trigger-dag-submit]')"
        assert browser.wait_for(f"{submit} && !{submit}.disabled ? 'enabled' : ''",
                                "enabled Trigger button in the form", timeout=20)
        form = artifacts / "trigger-form.png"
        form_stats = browser.picture_stats(browser.screenshot(form))
    finally:
        browser.close()
    for stats in (grid_stats, form_stats):
        # a blank or half-painted page has a handful of colours and little but background
        assert (stats["width"], stats["height"]) == (1600, 1100)
        assert stats["colours"] > 100 and stats["foreground"] > 0.05, stats

    with capsys.disabled():
        print(f"\nlive Airflow: run {run_id} succeeded {ran:.0f}s after the first INSERT "
              f"(retried: {retried or 'none'}); screenshots:\n  {grid} {grid_stats}\n"
              f"  {form} {form_stats}")


def test_the_follow_dag_takes_changes_as_they_are_archived(
        source: Source, config: Config, airflow: LiveAirflow,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``cdclake_follow``: one Spark application, submitted by the real scheduler's task,
    follows the archive for FOLLOW_FOR seconds; changes archived meanwhile reach the mirrors
    without another run, and the DAG run ends in success."""
    dag = airflow.wait_for_dag(FOLLOW_DAG, timeout=120)
    assert dag["is_paused"]
    airflow.call("PATCH", f"/api/v2/dags/{FOLLOW_DAG}", {"is_paused": False})
    run_id = f"follow__{uuid.uuid4().hex[:12]}"
    airflow.call("POST", f"/api/v2/dags/{FOLLOW_DAG}/dagRuns",
                 {"dag_run_id": run_id, "logical_date": None, "conf": {}})
    deadline = time.monotonic() + 120
    while airflow.task_states(FOLLOW_DAG, run_id).get("follow") != "running":
        assert time.monotonic() < deadline, (f"the follow task did not start: "
                                             f"{airflow.task_states(FOLLOW_DAG, run_id)}")
        time.sleep(0.5)
    # the application's first run starts once its Spark session is up; changes made now
    # come after the ingest DAG's last run and before this application's end
    time.sleep(10)
    changed = time.monotonic()
    for sql in PHASE_2:
        source.sql(sql)
    archive_all(source)
    while True:
        try:
            assert_mirrors_equal(source, config)
            break
        except AssertionError:
            assert airflow.task_states(FOLLOW_DAG, run_id).get("follow") == "running", \
                f"the follower ended before the changes arrived\n{airflow.diagnostics()}"
            time.sleep(1)
    fresh = time.monotonic() - changed
    ended = airflow.wait_for_run(FOLLOW_DAG, run_id, timeout=FOLLOW_FOR + 120)
    airflow.call("PATCH", f"/api/v2/dags/{FOLLOW_DAG}", {"is_paused": True})
    assert ended["state"] == "success", (f"{airflow.task_states(FOLLOW_DAG, run_id)}\n"
                                         f"{airflow.diagnostics()}")
    with capsys.disabled():
        print(f"\nlive Airflow: the follow DAG's application mirrored PHASE_2 {fresh:.1f}s "
              "after its first statement")
