"""How errors raised in Spark tasks come back to the driver.

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
import json
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from cdclake.errors import CdclakeError, rebuild
from cdclake.zipimports import keep_zip_directories

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
    """The file this process's JVM logs to, if cdclake started it
    (:func:`cdclake.sparkenv.session.session`)."""
    from pyspark import SparkContext

    try:
        jvm = SparkContext._jvm
        return None if jvm is None else jvm.java.lang.System.getProperty("cdclake.spark.log")
    except Exception:  # the JVM is gone: it was what failed
        return None
