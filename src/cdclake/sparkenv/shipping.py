"""cdclake's code for executors that are other processes, and the places it is built.

Executors that are not this process (any master but ``local``) import only what their cluster
has and what they are sent, so cdclake's own code goes to them as one zip, the way
``spark-submit --py-files`` sends it (:func:`ship`). Its dependencies (pyarrow, pyiceberg,
psycopg, ...) are the cluster's Python environment, as with any PySpark job.
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import cdclake

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
