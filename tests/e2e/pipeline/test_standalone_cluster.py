"""cdclake on a Spark standalone cluster whose executors have only what was shipped.

A master and one worker are started with ``spark-class``, as an operator starts them. The
executors' Python has cdclake's dependencies (pyarrow, pyiceberg, …) but not cdclake: a
virtualenv that sees this one's site-packages as a plain path, so the editable install's
``.pth`` hook is not run and ``import cdclake`` fails there (checked). A decode or merge task
that imports cdclake on an executor can then only work with the zip cdclake ships.

Both ways a job reaches the cluster take turns on one bank stream (tests/e2e/pipeline/
test_faults.py: keyed tables and a REPLICA IDENTITY FULL one, an initial snapshot, rounds of
every kind of change), with the Spark merge, the mirrors compared with the source (DuckDB)
after each: the ingest DAG whose Spark steps go through the Airflow Spark provider on a
``spark_default`` connection to the master (``spark-submit --py-files``), then ``cdclake run``
with ``CDCLAKE_SPARK_MASTER=spark://…`` (an in-process driver that ships the zip with
``addPyFile``; its executors decode with the compiled twins the zip carries). The DAG's first
round overlaps the snapshot (the changes the snapshot saw are dropped on Spark by transaction
visibility); the keyed tables are MERGE INTO commits; the FULL table, a multiset, goes to the
pyiceberg merge with the reason in the run report, but for a batch holding only its INSERTs
(an append on Spark); the mirror check runs on Spark DataFrames (GX's Spark engine).

Those merges leave each mirror several small files, position-delete files and snapshots:
``cdclake maintain`` then compacts them, expires snapshots, removes an orphan file and keeps
the watermark — and a run on the pyiceberg merge afterwards neither loses nor repeats a change.
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
from typing import Any

import pytest

from cdclake.lake.catalog import open_catalog
from cdclake.lake.watermark import committed_lsn
from cdclake.sparkenv.jars import pyspark_jars
from tests.e2e.pipeline.test_faults import Stream, bank_stream
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


def test_the_dag_then_cdclake_run_on_a_standalone_master_then_maintenance(
        cluster: tuple[str, Path, Path], airflow_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One bank stream, both ways in turn: the DAG through the Spark provider takes the
    first round (its snapshot, decode and merge each an application sent the zip), then
    ``cdclake run`` with the master as ``CDCLAKE_SPARK_MASTER`` the next; then maintenance,
    then a run on the pyiceberg merge."""
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
        assert apps_sent_the_zip(work) - apps, "cdclake run's executors were sent no zip"
        # the executors loaded the compiled hot path from the zip (cdclake.native)
        assert out["steps"]["decode"]["stats"]["pure_python_partitions"] == 0, out
        merged_on_spark(out)

        maintenance_compacts_expires_and_keeps_the_watermark(stream)
        stream.env["CDCLAKE_MERGE_ENGINE"] = "pyiceberg"
        stream.changes(rows=50)
        ok(cdclake(stream.env, "run", "--run-id", "after"))
        stream.assert_mirrors_equal()


def merged_on_spark(report: dict[str, Any]) -> None:
    """The keyed tables merged on Spark, the FULL one as it must be, checked on Spark."""
    checked = report["steps"]["validate_tables"]
    assert checked["success"] and checked["checked_on"] == "spark", checked
    tables = [t for b in report["steps"]["merge"]["batches"] for t in b["tables"]]
    for table in ("public.accounts", "public.events"):
        assert {(t["engine"], t["fallback"]) for t in tables if t["table"] == table} \
            == {("spark", "")}, tables
    # FULL: its UPDATEs and DELETEs go to pyiceberg; a batch with only its INSERTs is an
    # append on Spark
    tags = [t for t in tables if t["table"] == "public.tags"]
    assert any(t["engine"] == "pyiceberg" for t in tags), tags
    for t in tags:
        if t["engine"] == "pyiceberg":
            assert "FULL or NOTHING with UPDATEs or DELETEs" in str(t["fallback"]), t
        else:
            assert t["strategy"] in ("append", "none"), t  # none: all in the snapshot
            assert (t["updated"], t["deleted"]) == (0, 0), t


def maintenance_compacts_expires_and_keeps_the_watermark(stream: Stream) -> None:
    config = stream.config
    catalog = open_catalog(config)
    names = sorted(".".join(t) for t in catalog.list_tables(config.namespace))
    tables = {n: catalog.load_table(n) for n in names}
    watermarks = {n: committed_lsn(t, config.stream) for n, t in tables.items()}
    assert any(len(t.metadata.snapshots) > 1 for t in tables.values())
    # a file no snapshot references, old enough to go
    data_dir = tables[names[0]].location().removeprefix("file://") + "/data"
    orphan = os.path.join(data_dir, "orphan-left-by-a-dead-writer.parquet")
    with open(orphan, "wb") as f:
        f.write(b"PAR1 not referenced by any snapshot")
    old = time.time() - 3 * 86400
    os.utime(orphan, (old, old))

    out = ok(cdclake(stream.env, "maintain", "--keep-snapshots", "1", "--keep-hours", "0",
                     "--json"))
    result = {t["table"]: t for t in json.loads(out.stdout)["tables"]}
    assert sorted(result) == names
    for name, t in result.items():
        assert t["snapshots_after"] == 1, t
        assert t["data_files_after"] <= t["data_files_before"], t
        assert t["watermark"] == watermarks[name], t
    assert sum(t["rewritten_data_files"] for t in result.values()) > 0, result
    assert sum(t["orphan_files"] for t in result.values()) >= 1, result
    assert not os.path.exists(orphan)
    catalog = open_catalog(config)
    for name in names:  # the watermark survives the expiry of every snapshot that held it
        assert committed_lsn(catalog.load_table(name), config.stream) == watermarks[name]
    stream.assert_mirrors_equal()
