"""cdclake on a Spark standalone cluster whose executors have only what was shipped.

A master and one worker are started with ``spark-class``, as an operator starts them. The
executors' Python has cdclake's dependencies (pyarrow, pyiceberg, …) but not cdclake: a
virtualenv that sees this one's site-packages as a plain path, so the editable install's
``.pth`` hook is not run and ``import cdclake`` fails there (checked). A decode or merge task
that imports cdclake on an executor can then only work with the zip cdclake ships.

Both ways a job reaches the cluster take turns on one bank stream (tests/e2e/pipeline/
test_faults.py), with the Spark merge, the mirrors compared with the source (DuckDB) after
each: the ingest DAG whose Spark steps go through the Airflow Spark provider on a
``spark_default`` connection to the master (``spark-submit --py-files``), then ``cdclake run``
with ``CDCLAKE_SPARK_MASTER=spark://…`` (an in-process driver that ships the zip with
``addPyFile``; its executors decode with the compiled twins the zip carries).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.sparkenv.jars import pyspark_jars
from tests.e2e.pipeline.test_faults import bank_stream
from tests.e2e.pipeline.test_snapshot_cli import cdclake, ok

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: the master's, the worker's and the executors' JVMs as the suite runs its drivers' (C1 only,
#: the serial collector: tests/conftest.py): short-lived JVMs on a 2-core machine
TEST_JVM = os.environ.get("SPARK_SUBMIT_OPTS", "")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_without_cdclake(path: Path) -> Path:
    """A virtualenv whose site-packages reaches this one's as a path, not as a site dir."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(path)],  # type: ignore[attr-defined]
                   check=True)
    site = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    (path / "lib" / "python3.11" / "site-packages" / "deps.pth").write_text(site + "\n")
    python = path / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import pyarrow, pyiceberg; import cdclake"],
                           capture_output=True, text=True)
    assert "No module named 'cdclake'" in probe.stderr, probe.stderr
    return python


def _alive_workers(ui: int) -> int:
    """What the master's status page says (0 while it is not up)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@contextlib.contextmanager
def standalone_cluster(work: Path) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` with one worker of 2 cores, stopped at the end."""
    spark_home = pyspark_jars().parent
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_JAVA_OPTS": TEST_JVM,
           "SPARK_LOG_DIR": str(work / "logs"), "SPARK_WORKER_DIR": str(work / "work")}
    port, ui = _port(), _port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(spark_home / "bin" / "spark-class")
    procs = []
    with (work / "cluster.log").open("w") as log:
        try:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "2",
                 "--memory", "3g", "--webui-port", str(_port()),
                 "--work-dir", str(work / "work")],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            deadline = time.monotonic() + 120
            while _alive_workers(ui) < 1:
                assert time.monotonic() < deadline, (work / "cluster.log").read_text()[-3000:]
                time.sleep(1)
            yield url
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                proc.wait(60)


def apps_sent_the_zip(work: Path) -> set[str]:
    """The applications whose executors on the worker were sent cdclake's zip (each app has
    its own directory)."""
    return {p.parent.parent.name for p in (work / "work").glob("app-*/*/cdclake-*.zip")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    work = tmp_path_factory.mktemp("standalone")
    python = python_without_cdclake(work / "executor-python")
    with standalone_cluster(work) as url:
        yield url, work, python


def test_the_dag_then_cdclake_run_on_a_standalone_master(
        cluster: tuple[str, Path, Path], airflow_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One bank stream, both ways in turn: the DAG through the Spark provider takes the
    first round (its snapshot, decode and merge each an application sent the zip), then
    ``cdclake run`` with the master as ``CDCLAKE_SPARK_MASTER`` the next."""
    from tests.e2e.pipeline.test_ingest_dag import run_dag

    url, work, python = cluster
    with bank_stream(tmp_path / "home") as stream:
        for key, value in stream.env.items():
            if key.startswith(("CDCLAKE_", "AWS_")):
                monkeypatch.setenv(key, value)
        settings = {"CDCLAKE_MERGE_ENGINE": "spark", "PYSPARK_PYTHON": str(python),
                    "CDCLAKE_SPARK_CONF": "spark.executor.memory=1g,spark.cores.max=2,"
                    f"spark.executor.extraJavaOptions={TEST_JVM}"}
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT",
                           json.dumps({"conn_type": "spark", "host": url}))
        stream.changes()
        run_dag(airflow_home)
        stream.assert_mirrors_equal()
        apps = apps_sent_the_zip(work)
        # snapshot, decode and merge: one application each on the cluster, each sent the zip
        assert len(apps) >= 3, apps

        stream.env.update({"CDCLAKE_SPARK_MASTER": url, **settings})
        stream.changes()
        out = json.loads(ok(cdclake(stream.env, "run", "--run-id", "cluster", "--json")).stdout)
        stream.assert_mirrors_equal()
        # the executors loaded the compiled hot path from the zip (cdclake.native)
        assert out["steps"]["decode"]["stats"]["pure_python_partitions"] == 0, out
        engines = {t["table"]: t["engine"] for b in out["steps"]["merge"]["batches"]
                   for t in b["tables"]}
        assert engines["public.accounts"] == engines["public.events"] == "spark"
    assert apps_sent_the_zip(work) - apps, "cdclake run's executors were sent no zip"
