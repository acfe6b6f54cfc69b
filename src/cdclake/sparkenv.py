"""Where Spark runs, and what its executors are given.

Every Spark session cdclake opens (decode, snapshot, merge, SQL) starts from :func:`builder`:

- the master is ``config.spark_master``, unless ``spark-submit`` started this process (the
  Airflow Spark provider does): then the master, the jars and the settings are spark-submit's,
  and a session must not override them;
- executors that are not this process (any master but ``local``) import only what their
  cluster has and what they are sent, so cdclake's own code goes to them as one zip, the way
  ``spark-submit --py-files`` sends it (:func:`ship`). Its dependencies (pyarrow, pyiceberg,
  psycopg, …) are the cluster's Python environment, as with any PySpark job.
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import cdclake
from cdclake.config import Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cache_dir() -> Path:
    """Built artefacts (the package zip, the Iceberg jar set): inside the virtualenv, so
    removing it removes them."""
    return Path(sys.prefix) / "share" / "cdclake"


def submitted() -> bool:
    """True in a driver ``spark-submit`` started: its JVM is already running, with the class
    path and settings it was given (pyspark connects to it through this variable)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def package_zip(cache: Path | None = None) -> Path:
    """cdclake's modules and package data as one zip, named by a digest of their content (so a
    changed checkout ships a new zip, and an unchanged one reuses it).

    A process that itself imported cdclake from a zip (an executor, a driver started with
    ``--py-files``) ships that zip again.
    """
    root = Path(cdclake.__file__).parent
    if not root.is_dir():
        return Path(cdclake.__spec__.loader.archive)  # type: ignore[union-attr]
    files = sorted(Path(d) / f for d, dirs, names in os.walk(root, followlinks=True)
                   if "__pycache__" not in Path(d).parts  # package data may be symlinked
                   # the compiled twins go too: cdclake.native loads them from the zip
                   for f in names if not f.endswith((".pyc", ".c")))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    out = (cache or cache_dir()) / f"cdclake-{digest.hexdigest()[:16]}.zip"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            zf.write(path, Path("cdclake") / path.relative_to(root))
    os.replace(tmp, out)
    return out


def builder(config: Config, app: str, conf: dict[str, str]) -> SparkSession.Builder:
    """A session builder for ``config`` with ``conf`` (cdclake's settings for this kind of
    session), then ``config.spark_conf`` over it.

    Python workers run this interpreter unless PYSPARK_PYTHON says otherwise. Settings the JVM
    reads at start (``spark.driver.memory``, class paths) only take effect in a process that
    has no JVM yet; under spark-submit they are the submitter's (:mod:`cdclake.pipeline.submit`
    passes the same ones).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(f"cdclake-{app}-{config.stream}")
    if not submitted():
        b = b.master(config.spark_master)
    for key, value in {"spark.ui.enabled": "false",
                       "spark.ui.showConsoleProgress": "false",  # cdclake logs its progress
                       **conf, **config.spark_conf}.items():
        b = b.config(key, value)
    return b


def ship(spark: SparkSession) -> None:
    """Send cdclake's zip to the executors of a session whose executors are other processes.

    Under ``local`` they are this process's own Python workers, which import the installed
    package. A zip spark-submit already sent (``--py-files``) is not sent twice.
    """
    sc = spark.sparkContext
    if is_local(sc.master):
        return
    path = package_zip()
    sent = sc.getConf().get("spark.submit.pyFiles", "") or ""
    if path.name not in {Path(p).name for p in sent.split(",") if p}:
        sc.addPyFile(str(path))
