"""The Spark steps of a run (snapshot, decode, merge) as Spark applications, submitted the way
Airflow users submit Spark: the Airflow Spark provider's ``SparkSubmitHook`` on a connection
(``config.spark_conn_id``, ``spark_default``), whose host is the master (``local[*]``,
``spark://host:7077``, ``k8s://https://…``, ``yarn``) and whose extras choose the deploy mode.

What goes with each submission:

- ``--py-files``: cdclake's own code as one zip (:func:`cdclake.sparkenv.shipping.package_zip`), so
  executors import only the cluster's Python environment plus what was sent;
- ``--properties-file`` (mode 0600): every Spark setting of the session the step would have
  built in-process, ``config.spark_conf`` last: Iceberg's runtime (``spark.jars``) and the
  catalog's JDBC driver on the driver's class path (:func:`cdclake.sparkenv.session.spark_conf`),
  the catalog, the Python of driver and executors. Catalog passwords stay off the command
  line.

The application (:mod:`cdclake.pipeline.sparkapp`) reads the configuration from the same
``CDCLAKE_*`` environment, runs the step, and writes its result (or its one-line error) to
``state/submitted/<token>.json`` in the store, where this side reads it back: the store is the
one place both a client-mode and a cluster-mode driver reach.

When Airflow has no connection by that id, it is ``config.spark_master``; the provider's own
fallback (YARN) would be wrong on a machine without one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import stat
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cdclake.archive import Layout, open_store
from cdclake.config import Config
from cdclake.errors import CdclakeError, ConfigError, ObjectNotFound, rebuild, redact
from cdclake.pipeline.params import RunParams

#: the steps that run on Spark (and the ``cdclake_follow`` DAG's follower, every step on one
#: session); the others are plain Python tasks
SPARK_STEPS = ("snapshot", "decode", "merge", "follow")
APPLICATION = Path(__file__).with_name("sparkapp.py")


def submit(step: str, config: Config, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run ``step`` as a Spark application through the Airflow Spark provider; its result.
    A step that starts no Spark runs here: the merge on pyiceberg (``merge_engine``'s
    default), a snapshot with no table to copy (its tables chosen once, here, and given to
    the step: one that appears meanwhile is the next run's), a decode with no new segment or
    a dry one (planned here: a segment archived meanwhile is the next run's).

    A failed step raises its own one-line error, of its own class (a ConfigError, LakeError,
    WalCorruptError, …); a submission that ended without a result (the driver died, the
    master refused it) raises one naming the exit and where the log is.
    """
    if step not in SPARK_STEPS:
        raise ConfigError(f"{step!r} is not a Spark step ({', '.join(SPARK_STEPS)})")
    run = RunParams.from_mapping(params)  # a bad parameter fails here, before any JVM
    # a step that starts no Spark runs here: an application would be a JVM and a driver
    # for nothing (some 4 s of CPU, more of wall time, in every run of the DAG)
    from cdclake.pipeline import steps

    if step == "merge" and config.merge_engine != "spark":
        return steps.merge(config, run)
    if step == "snapshot" and not (todo := steps.tables_to_snapshot(config, run)):
        return steps.snapshot(config, run, todo=todo)
    if step == "decode":
        planned = steps.decode(config, dataclasses.replace(run, dry_run=True))  # no Spark
        if run.dry_run or planned["batch"] is None:
            return {**planned, "dry_run": run.dry_run}
    from airflow.exceptions import AirflowException
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from cdclake.sparkenv.classdata import java_options
    from cdclake.sparkenv.jars import ensure_jars, pyspark_jars
    from cdclake.sparkenv.session import spark_conf, workers_conf
    from cdclake.sparkenv.shipping import package_zip

    jars = ensure_jars(config)
    spark_home = pyspark_jars().parent  # pyspark's own Spark; its scripts need SPARK_HOME
    store, layout = open_store(config), Layout()
    key = layout.submitted_key(uuid.uuid4().hex)
    with tempfile.TemporaryDirectory(prefix="cdclake-submit-") as tmp:
        with _connection(config) as master:  # the hook resolves it once, here
            props = _properties(Path(tmp) / "spark.properties", {
                "spark.pyspark.driver.python": sys.executable,
                "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
                # a driver on this host maps the class-data archive; one elsewhere has none
                **({"spark.driver.extraJavaOptions": options}
                   if (options := java_options(jars)) else {}),
                **workers_conf(master, ()),  # the step's session names its tasks
                **spark_conf(config, jars, master="cluster"), **config.spark_conf})
            hook = SparkSubmitHook(
                conn_id=config.spark_conn_id, name=f"cdclake-{step}-{config.stream}",
                py_files=str(package_zip()), properties_file=str(props),
                spark_binary=str(spark_home / "bin" / "spark-submit"),
                application_args=[step, "--params", json.dumps(run.to_json()), "--result",
                                  key])
        try:
            hook.submit(str(APPLICATION), env={**os.environ, "SPARK_HOME": str(spark_home)})
            failure = "it exited 0"
        except AirflowException as exc:
            code = re.search(r"Error code is: (-?\d+)", str(exc))
            failure = f"exit {code.group(1)}" if code else redact(str(exc).splitlines()[0])
    try:
        answer = json.loads(store.get(key))
    except ObjectNotFound:
        raise CdclakeError(f"spark-submit of {step} ended without a result ({failure}); "
                           "the task log has Spark's output") from None
    finally:
        store.delete(key)
    if "error" in answer:  # the step's own error, as the application raised it
        raise rebuild(answer.get("type", ""), answer["error"])
    return answer["result"]


@contextlib.contextmanager
def _connection(config: Config) -> Iterator[str]:
    """``config.spark_conn_id`` as Airflow has it, else ``config.spark_master`` as that
    connection (an environment variable connection, while the hook is built); the master it
    names, as the Spark provider reads it (host, and port when there is one)."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.hooks.base import BaseHook

    try:
        conn = BaseHook.get_connection(config.spark_conn_id)
    except AirflowNotFoundException:
        conn = None
    if conn is not None:
        yield f"{conn.host}:{conn.port}" if conn.port else (conn.host or "")
        return
    var = f"AIRFLOW_CONN_{config.spark_conn_id.upper()}"
    os.environ[var] = json.dumps({"conn_type": "spark", "host": config.spark_master})
    try:
        yield config.spark_master
    finally:
        os.environ.pop(var, None)


def _properties(path: Path, conf: Mapping[str, str]) -> Path:
    """``conf`` as a Java properties file only its owner may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for key, value in conf.items():
            f.write(f"{_escape(key)}={_escape(value)}\n")
    return path


def _escape(text: str) -> str:
    return (text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
            .replace("=", "\\=").replace(":", "\\:"))
