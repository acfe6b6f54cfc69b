"""Build the Spark driver's class-data archive (:mod:`cdclake.sparkenv.classdata`) at install:
``python -m cdclake.sparkenv.classdump``, which ``make`` runs.

A session of the default configuration, in a JVM started with ``-XX:ArchiveClassesAtExit``,
runs what cdclake's steps make a driver load (an Iceberg table created, appended to, merged
into, deleted from and read; a Python task over a frame built here); the JVM writes the
archive as it exits, under a temporary name renamed once the JVM has ended with status 0, so
no reader ever maps a partial archive (a JVM crashes on a truncated one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.sparkenv.catalog import SPARK_CATALOG
from cdclake.sparkenv.classdata import QUIET, archive
from cdclake.sparkenv.jars import ensure_jars
from cdclake.sparkenv.session import end, session
from cdclake.sparkenv.tasks import error_line

#: the workload's own catalog, beside cdclake's (which pyiceberg would have to create first)
CATALOG = "classdump"


def build(config: Config) -> Path:
    """Build the archive for ``config``'s jars, unless it is there; its path. Must run in a
    process that has no JVM yet (the options are read when the JVM starts); the workload's
    table is written under ``config.home``."""
    target = archive(ensure_jars(config))
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(filter(None, (
        os.environ.get("SPARK_SUBMIT_OPTS"), QUIET, f"-XX:ArchiveClassesAtExit={partial}")))
    try:
        warehouse = config.home / CATALOG
        spark = session(config.replace(spark_conf={
            **config.spark_conf, f"spark.sql.catalog.{CATALOG}": SPARK_CATALOG,
            f"spark.sql.catalog.{CATALOG}.type": "hadoop",
            f"spark.sql.catalog.{CATALOG}.warehouse": str(warehouse),
            "spark.sql.defaultCatalog": CATALOG}), "classdump")
        _workload(spark)
        status = end()  # the JVM writes the archive as it exits; end() waits for that
        if status != 0 or not partial.exists():  # a JVM cut short leaves a partial file
            raise ConfigError(f"the JVM wrote no class-data archive at {partial} "
                              f"(exit {status})")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    for old in target.parent.glob("driver-*.jsa"):
        if old != target:
            old.unlink(missing_ok=True)
    return target


def _workload(spark: Any) -> None:
    """What a run's steps make the driver load: an Iceberg table created, appended to,
    merged into, deleted from and read; a Python task over an Arrow-built frame."""
    sql = spark.sql
    sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    sql(f"CREATE TABLE {CATALOG}.db.t (id bigint, v string) USING iceberg TBLPROPERTIES ("
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')")
    sql(f"INSERT INTO {CATALOG}.db.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    frame = spark.createDataFrame([(2, "x"), (4, "y")], "id bigint, v string")
    frame.createOrReplaceTempView("changes")
    sql(f"MERGE INTO {CATALOG}.db.t t USING changes c ON t.id = c.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    sql(f"DELETE FROM {CATALOG}.db.t WHERE id = 1")
    sql(f"SELECT v, count(*) FROM {CATALOG}.db.t GROUP BY v ORDER BY v").collect()
    frame.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cdclake.sparkenv.classdump``: build the archive at install time. A build
    that fails says so in one line and exits 0: sessions start without an archive."""
    argparse.ArgumentParser(prog="python -m cdclake.sparkenv.classdump",
                            description=main.__doc__).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cdclake-classdump-") as home:
        try:
            path = build(Config.load(env={"CDCLAKE_HOME": home}))
        except Exception as exc:
            print(f"cdclake sparkenv.classdump: no class-data archive, Spark starts without "
                  f"one: {error_line(exc)}", file=sys.stderr)
            return 0
    print(f"Spark driver class-data archive: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
