"""Where Spark runs, what its executors are given, and how their errors come back.

Every Spark session cdclake opens (decode, snapshot, merge, SQL) starts from :func:`builder`:

- the master is ``config.spark_master``, unless ``spark-submit`` started this process (the
  Airflow Spark provider does): then the master, the jars and the settings are spark-submit's,
  and a session must not override them;
- a JVM it starts logs to ``<home>/logs/spark.log``, not to the terminal: a failed task is
  a page of Java and Python traces there, and one line from cdclake on the console;
- executors that are not this process (any master but ``local``) import only what their
  cluster has and what they are sent, so cdclake's own code goes to them as one zip, the way
  ``spark-submit --py-files`` sends it (:func:`ship`). Its dependencies (pyarrow, pyiceberg,
  psycopg, …) are the cluster's Python environment, as with any PySpark job.

An exception raised in a task reaches the driver as the text of the worker's traceback inside
Java's (a Py4J or pyspark exception), never as itself. Every task body cdclake gives Spark is
wrapped by :func:`task`, which re-raises what the body raised as a token (class, message,
attributes) after a marker and a random nonce of the driver process that built the task; every
Spark action runs in :func:`spark_errors`, which finds that token and raises the task's
cdclake error again — the same class and the same line — or, for anything else Spark raises,
one CdclakeError naming what failed, its first line and the log. Only the driver and its tasks
know the nonce, so no text a task handles (a table name, a value, a server's message) can pass
for a token.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cdclake
from cdclake.config import Config
from cdclake.errors import CdclakeError, rebuild
from cdclake.zipimports import keep_zip_directories

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
        defaults["spark.driver.extraJavaOptions"] = _log_to(config.logs_path() / "spark.log")
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


# -- errors raised in tasks ---------------------------------------------------------------------

#: precedes a task's error token in the worker's traceback; the driver's nonce follows it
MARK = "cdclake-task-error"
#: this process's nonce: tasks built here carry it (in their closure), no one else knows it
_NONCE = secrets.token_hex(16)
_TOKEN = re.compile(rf"{MARK}:([0-9a-f]{{32}}):([A-Za-z0-9_-]+=*)")


class TaskFailed(Exception):
    """What a task wrapped by :func:`task` raises: its message is the token of the error the
    task body raised (:func:`task_error` reads it back in the driver)."""


def task(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as the body of Spark tasks (``map``, ``flatMap``, ``mapPartitions``,
    ``mapInArrow``): whatever it raises, also while Spark iterates what it returned, is raised
    again as :class:`TaskFailed` carrying a token of it — its class, message and plain
    attributes, base64 after :data:`MARK` and the nonce of the driver that wrapped it. The
    worker's traceback (in Spark's log) keeps the original error above it. The worker reads
    the zip archives on its path once from then on (:mod:`cdclake.zipimports`)."""
    nonce = _NONCE

    def run(*args: Any) -> Any:
        keep_zip_directories()  # before the task's own imports; once per worker
        try:
            out = fn(*args)
        except Exception as exc:
            raise TaskFailed(_token(exc, nonce)) from exc
        return _guarded(out, nonce) if isinstance(out, Iterator) else out

    return run


def _guarded(items: Iterator[Any], nonce: str) -> Iterator[Any]:
    try:
        yield from items
    except Exception as exc:
        raise TaskFailed(_token(exc, nonce)) from exc


def _token(exc: Exception, nonce: str) -> str:
    attrs = {k: v for k, v in getattr(exc, "__dict__", {}).items()
             if isinstance(v, str | int | float | bool) or v is None}
    payload = {"type": type(exc).__name__, "cdclake": isinstance(exc, CdclakeError),
               "message": str(exc), "attrs": attrs}
    return f"{MARK}:{nonce}:{base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()}"


def _text(thing: object) -> str:
    """What Spark says in ``thing``: a Py4J error's text is the Java exception with its
    causes, a captured pyspark error's the worker's traceback."""
    try:
        return str(thing)
    except Exception:  # a Py4J object's text is asked of the JVM, which may be gone
        return repr(getattr(thing, "args", thing))


def _task_payload(exc: BaseException) -> dict[str, Any] | None:
    """The error a task of this driver raised, if ``exc`` reports one (its first)."""
    for found in _TOKEN.finditer(_text(exc)):
        if secrets.compare_digest(found[1], _NONCE):
            try:
                data = json.loads(base64.urlsafe_b64decode(found[2]))
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def task_error(exc: BaseException) -> CdclakeError | None:
    """The cdclake error a task raised — the same class, message and attributes — if ``exc``
    (what a Spark action raised in the driver) reports one."""
    data = _task_payload(exc)
    if data is None or not data.get("cdclake"):
        return None
    return rebuild(str(data.get("type")), str(data.get("message")), data.get("attrs") or {})


def error_line(exc: BaseException) -> str:
    """One line for what Spark raised: a task's own error (``Type: message``; cdclake's
    message alone), else the first line of the Java exception's message (not py4j's "An error
    occurred while calling ...")."""
    data = _task_payload(exc)
    if data is not None:
        message = " ".join(str(data.get("message")).split())
        return message if data.get("cdclake") else f"{data.get('type')}: {message}"
    from py4j.protocol import Py4JJavaError

    text = _text(exc.java_exception if isinstance(exc, Py4JJavaError) else exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _from_spark(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark's (Py4J, pyspark): what a Spark action raises for a failed job,
    a lost JVM, a refused statement — not a bug in the driver's own code."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(exc, Py4JError | PySparkException)


@contextlib.contextmanager
def spark_errors(what: str, error: type[CdclakeError] = CdclakeError) -> Iterator[None]:
    """Run Spark actions: a cdclake error one of their tasks raised is raised again as itself;
    any other Spark failure as ``error`` naming ``what`` failed, the failure's first line
    and the log with the whole of it. The driver's own exceptions pass unchanged."""
    try:
        yield
    except CdclakeError:
        raise
    except Exception as exc:
        if not _from_spark(exc):
            raise
        raised = task_error(exc)
        if raised is None:
            log = _spark_log()
            raised = error(f"{what}: {error_line(exc)}"
                           + (f" (Spark's log: {log})" if log else ""))
        raise raised from exc


def _spark_log() -> str | None:
    """The file this process's JVM logs to, if cdclake started it (:func:`builder`)."""
    from pyspark import SparkContext

    try:
        jvm = SparkContext._jvm
        return None if jvm is None else jvm.java.lang.System.getProperty("cdclake.spark.log")
    except Exception:  # the JVM is gone: it was what failed
        return None
