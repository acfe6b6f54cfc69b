"""The Spark driver's class-data archive: the JVM's parsed classes, mapped instead of loaded.

A Spark driver loads some ten thousand classes from pyspark's jars and Iceberg's runtime at
every start, and that is most of a short run's CPU: ``cdclake run`` pays it once per run, a
scheduled DAG once per Spark task. A JVM given an archive of those classes (HotSpot's
class-data sharing, ``-XX:SharedArchiveFile``) maps them: on this project's 2-core machine a
session's start and first queries took 7.5 s of CPU instead of 11.7 (5.5 s of wall time
instead of 7.9).

An archive is valid for one JVM build and one class path, so its name carries both
(:func:`archive`); a JVM that cannot use it (another JDK, a class path changed by
``spark_conf``, a driver on another host) runs without it, silently (:func:`java_options`).
It is built at install (:mod:`cdclake.sparkenv.classdump`, which ``make`` runs); without
one every session works as before, only slower to start.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cdclake.sparkenv import shipping
from cdclake.sparkenv.jars import JarSet, java, pyspark_jars

#: the JVM says nothing about an archive it cannot use (it then loads classes as always)
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive(jars: JarSet) -> Path:
    """Where the archive for this JVM and ``jars``' class path is (or would be)."""
    jvm = Path(java()).resolve()
    key = "\0".join((str(jvm), str(jvm.stat().st_mtime_ns), str(pyspark_jars()),
                     jars.classpath()))
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return shipping.cache_dir() / "classdata" / f"driver-{name}.jsa"


def java_options(jars: JarSet) -> str:
    """The driver's Java options that map the archive, when there is one ("" otherwise)."""
    path = archive(jars)
    return f"{QUIET} -XX:SharedArchiveFile={path}" if path.exists() else ""
