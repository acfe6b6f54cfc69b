"""The one way cdclake opens a Spark session: decode, snapshot, merge, the mirror check,
maintenance and ``cdclake sql`` all call :func:`session`, so one process has one session and
one JVM, whichever of them asked first.

- the master is ``config.spark_master``, unless ``spark-submit`` started this process (the
  Airflow Spark provider does): then the master, the jars and the settings are spark-submit's,
  and a session must not override them;
- every session can read and write the mirrors: Iceberg's Spark runtime and the catalog
  database's JDBC driver on the class path (:mod:`cdclake.sparkenv.jars`), the catalog named
  ``config.catalog_name`` as the session's default (:mod:`cdclake.sparkenv.catalog`);
- a JVM it starts logs to ``<home>/logs/spark.log``, not to the terminal: a failed task is
  a page of Java and Python traces there, and one line from cdclake on the console;
- executors that are other processes get cdclake's zip (:mod:`cdclake.sparkenv.shipping`).

A mirror's SQL catalog must exist before Spark reads it (Iceberg's catalog is told not to
create pyiceberg's tables): callers that query the mirrors open the catalog with
:func:`cdclake.lake.catalog.open_catalog` first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.sparkenv.catalog import EXTENSIONS, SPARK_CATALOG, catalog_conf, is_sql
from cdclake.sparkenv.classdata import java_options
from cdclake.sparkenv.daemon import DAEMON, MODULES
from cdclake.sparkenv.jars import JarSet, ensure_jars
from cdclake.sparkenv.shipping import cache_dir, is_local, ship, submitted

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def session(config: Config, app: str, *, mirrors: bool = True,
            tasks: tuple[str, ...] = (), cache: Path | None = None) -> SparkSession:
    """This process's session on ``config.spark_master`` (``app`` names it when it starts
    here): cdclake's settings, then ``config.spark_conf`` over them.

    ``mirrors``: the caller reads or writes the mirrors through Spark's catalog, so a catalog
    whose Spark settings cannot be derived (not SQL, and none in ``spark_conf``) is refused
    here; the decode and the snapshot, which never do, pass False and get the session
    without that catalog. The class path is read when the JVM starts: a process whose JVM
    cannot load Iceberg (one started by someone else) has it stopped first. ``cache``: where
    the relocated Jackson jar is built (the virtualenv's by default). ``tasks``: the modules
    of the caller's task bodies, which this host's workers then find loaded
    (:func:`workers_conf`; a session started earlier keeps the modules its caller named).
    """
    jars = ensure_jars(config, cache=cache)
    _drop_jvm_without_iceberg()
    conf = {"spark.sql.session.timeZone": "UTC", **task_counts(config),
            **workers_conf(None if submitted() else config.spark_master, tasks),
            **spark_conf(config, jars, config.spark_master, mirrors=mirrors)}
    spark = builder(config, app, conf, java=java_options(jars)).getOrCreate()
    ship(spark)
    return spark


#: SQL shuffle partitions per core cdclake's jobs use: two, so a skewed task does not hold a
#: whole stage back
SHUFFLE_PER_CORE = 2


def task_counts(config: Config) -> dict[str, str]:
    """How many tasks Spark makes: ``config.spark_partitions`` (the cores cdclake's jobs use,
    the decode's partitions) for RDDs, :data:`SHUFFLE_PER_CORE` times that for the shuffles
    of SQL (the Spark merge's windows and MERGE INTO, maintenance's rewrites).

    Spark SQL's own default, 200 shuffle partitions, is sized for clusters hundreds of cores
    wide, and adaptive execution coalesces the partitions a stage reads, never the tasks
    of every stage: merging a small batch on two cores ran some 200 tasks per shuffle. The
    Spark merge then maintenance test took 99 s of CPU with it, 77 s with 4. ``spark_conf``
    overrides both, as any setting."""
    return {"spark.default.parallelism": str(config.spark_partitions),
            "spark.sql.shuffle.partitions": str(SHUFFLE_PER_CORE * config.spark_partitions)}


def workers_conf(master: str | None, tasks: tuple[str, ...]) -> dict[str, str]:
    """Python workers on this host (a ``local`` master) fork from cdclake's daemon
    (:mod:`cdclake.sparkenv.daemon`: pyspark's, with its bytecode and ``tasks`` loaded before
    it forks a worker); other masters' executors keep pyspark's, and leave the variable
    naming ``tasks`` unread. ``master`` None: spark-submit's, whose properties chose the
    daemon (:func:`cdclake.pipeline.submit.submit`)."""
    conf = {f"spark.executorEnv.{MODULES}": ",".join(tasks)}
    if master is not None and is_local(master):
        conf["spark.python.daemon.module"] = DAEMON
    return conf


def spark_conf(config: Config, jars: JarSet, master: str = "local", *,
               mirrors: bool = True) -> dict[str, str]:
    """Every Spark setting the mirrors need: class path, extensions, the catalog (named
    ``config.catalog_name``, the session's default, so ``<namespace>.<table>`` resolves).

    The driver has the jars on its class path. Executors of ``local`` are the driver's JVM;
    any other ``master``'s get the runtime and its Jackson sent (``spark.jars``): they read
    and write data files, and only the driver talks to the catalog's database.

    A catalog other than SQL (REST, Glue, Hive) is the user's to configure through
    ``spark_conf`` (``spark.sql.catalog.<name>.*``); only the jars and extensions come from
    here, and without the user's settings such a catalog is refused when ``mirrors`` (else
    left out).
    """
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    conf = {"spark.driver.extraClassPath": jars.classpath(),
            "spark.sql.extensions": EXTENSIONS}
    if is_local(master):
        conf["spark.executor.extraClassPath"] = jars.classpath()
    else:
        conf["spark.jars"] = f"{jars.runtime},{jars.jackson}"
    if is_sql(config):
        conf[prefix] = SPARK_CATALOG
        conf.update({f"{prefix}.{k}": v for k, v in catalog_conf(config).items()})
    elif prefix not in config.spark_conf:
        if not mirrors:
            return conf
        raise ConfigError(f"Spark SQL derives only a SQL catalog's settings; catalog "
                          f"{name!r} is {config.catalog_properties['type']!r}: set "
                          f"{prefix}=org.apache.iceberg.spark.SparkCatalog and its options in "
                          "spark_conf")
    conf["spark.sql.defaultCatalog"] = name
    return conf


def builder(config: Config, app: str, conf: dict[str, str], *,
            java: str = "") -> SparkSession.Builder:
    """A session builder for ``config`` with ``conf`` (cdclake's settings for this kind of
    session), then ``config.spark_conf`` over it; ``java``: more options for a JVM started
    here (:func:`cdclake.sparkenv.classdata.java_options`).

    Python workers run this interpreter unless PYSPARK_PYTHON says otherwise. Settings the JVM
    reads at start (``spark.driver.memory``, class paths, its log) only take effect in a
    process that has no JVM yet; under spark-submit they are the submitter's
    (:mod:`cdclake.pipeline.submit` passes the same ones, and Spark logs to the task's log).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(f"cdclake-{app}-{config.stream}")
    defaults = {"spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false"}  # cdclake logs its progress
    if not submitted():
        b = b.master(config.spark_master)
        defaults["spark.driver.extraJavaOptions"] = " ".join(filter(None, (
            _log_to(config.logs_path() / "spark.log"), java)))
    for key, value in {**defaults, **conf, **config.spark_conf}.items():
        b = b.config(key, value)
    return b


#: log4j2 for a JVM cdclake starts: warnings and errors to a file (rolled at 10 MB, three
#: kept), nothing to the terminal; the repl logger at the root's level, or pyspark's start-up
#: announces "Setting default log level"
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:cdclake.spark.log}
appender.file.filePattern = ${sys:cdclake.spark.log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
"""


def _log_to(path: Path) -> str:
    """The driver's Java options that make a JVM started now log to ``path``: ``-D`` options
    Spark splits as a shell would (so quoted)."""
    config_file = cache_dir() / "log4j2-cdclake.properties"
    if not config_file.exists() or config_file.read_text() != LOG4J:
        config_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = config_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(LOG4J)
        os.replace(tmp, config_file)
    # log4j makes the log's directory when it opens the file
    return " ".join(_quoted(f"-D{k}={v}") for k, v in (
        ("log4j2.configurationFile", config_file), ("cdclake.spark.log", path)))


def _quoted(word: str) -> str:
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _drop_jvm_without_iceberg() -> None:
    """Stop this process's Spark JVM if it cannot load Iceberg's catalog: pyspark keeps one
    JVM per process, and a new session on it would keep the old class path."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    try:
        gateway.jvm.java.lang.Class.forName(SPARK_CATALOG)
        return
    except Py4JError:
        if submitted():
            raise ConfigError("spark-submit did not give this driver Iceberg's Spark runtime: "
                              "submit it with the settings spark_conf derives (spark.jars, "
                              "spark.driver.extraClassPath), as cdclake.pipeline.submit "
                              "does") from None
    end()


def end() -> int | None:
    """Stop this process's session and the JVM pyspark started for it, and wait until that
    JVM has ended: a process that exits first leaves the JVM running its shutdown for a
    while, orphaned (a follower stopped by SIGTERM must take its JVM with it). Under
    spark-submit the JVM is the submitter's and stays. The JVM's exit status, when it was
    this process's."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    if gateway is None or submitted():
        return None
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM ends when its stdin closes
        proc.stdin.close()
        proc.wait(60)
    SparkContext._gateway = None
    SparkContext._jvm = None
    return None if proc is None else proc.returncode
