"""``cdclake run --follow``: one process and one warm Spark session run the steps whenever new
segments are archived.

A scheduled run pays for a Spark start (10–15 s here) and waits for its schedule; a follower
pays for neither, so a change is queryable about one archive interval
(``archive_timeout``) plus one run after its commit. It looks at the archive every
``config.follow_poll`` seconds — one listing of the segment manifest, and of
``config.archive_dir`` when it ships one (:func:`archive_mark`) — and runs
:func:`~cdclake.pipeline.steps.run_once` when either changed: a quiet source costs a listing
per poll.

It holds the stream's decode lease for its whole life (:func:`steps.holding`), so a
scheduled run's decode waits for it, then refuses naming the follower; the lake lease is
taken per step as by any run, so the maintenance DAG goes in between two of its runs.

A run that fails with cdclake's error (the store unreachable, a gap, a failed check, a
table's merge) is reported as any run's and tried again after a pause that doubles up to
:data:`MAX_RETRY` seconds; a wrong configuration ends the follower (exit 2), and so does a
bug (exit 1). SIGTERM or SIGINT lets the step under way finish, leaves the others for the
next run and ends with status 0; a second one abandons the step (each is safe to abandon:
the next run finishes it) and ends at once, the leases given back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cdclake.archive import Layout, open_store
from cdclake.archive.lease import DECODE
from cdclake.archive.manifest import Manifest
from cdclake.config import Config
from cdclake.errors import CdclakeError, ConfigError, redact
from cdclake.pipeline import steps
from cdclake.pipeline.params import RunParams

log = logging.getLogger(__name__)

#: the longest pause, in seconds, before a failed run is tried again
MAX_RETRY = 60.0


def archive_mark(config: Config) -> tuple[str | None, int]:
    """What the archive holds, cheaply: the newest name and the number of names in the
    segment manifest and ``config.archive_dir`` together (what a run would ship is in the
    directory first, then in both). A run is due when it changes."""
    names = set(Manifest(open_store(config), Layout()).names())
    if config.archive_dir is not None:
        with contextlib.suppress(OSError):  # the ship step says what is wrong with it
            names.update(e.name for e in os.scandir(config.archive_dir) if e.is_file())
    return max(names, default=None), len(names)


def check_params(params: RunParams) -> RunParams:
    """Refuse what is for a single run (before a Spark session is started for nothing)."""
    if params.dry_run:
        raise ConfigError("--follow runs the steps for real: it cannot be a dry run")
    if params.end_lsn is not None or params.until_segment:
        raise ConfigError("--follow decodes what comes: --end-lsn and --until-segment are "
                          "for a single run")
    return params


def follow_session(config: Config) -> Any:
    """The one Spark session every run of the follower uses, started once: Iceberg's runtime
    on its class path, so the decode, the snapshot, the Spark merge and the mirror check all
    run on it."""
    return steps.lake_session(
        config, lambda line: ConfigError(f"--follow: Spark does not start ({line})"),
        tasks=(*steps.MERGE_TASKS, "cdclake.spark.job", "cdclake.snapshot.chunks"))


@contextlib.contextmanager
def stop_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (the step under way finishes); a second one raises
    KeyboardInterrupt where the process is (the step is abandoned). The handlers before are
    put back on the way out."""

    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("follow: %s: finishing the step under way, then stopping",
                    signal.Signals(signum).name)
        stop.set()

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def follow(config: Config, params: RunParams | None = None, *, stop: threading.Event,
           spark: Any = None, until: float | None = None,
           clock: Callable[[], float] = time.monotonic,
           on_run: Callable[[dict[str, Any]], None] | None = None,
           on_error: Callable[[CdclakeError], None] | None = None,
           **run_kwargs: Any) -> int:
    """Run :func:`steps.run_once` whenever :func:`archive_mark` changes, until ``stop`` is
    set (or ``clock()`` reaches ``until``); returns how many runs it made. ``on_run`` gets
    each run's report, ``on_error`` each failed run's error (then tried again later);
    ``run_kwargs`` go to ``run_once``."""
    params = check_params(params or RunParams())
    from cdclake.quality import QualityContext

    runs, failures, retry_at, seen = 0, 0, 0.0, None

    def going() -> bool:
        return not stop.is_set() and (until is None or clock() < until)

    spark = spark if spark is not None else follow_session(config)
    quality = QualityContext.for_config(config)
    while going():
        # held for the follower's life; taken again if it stalled past the lease's expiry
        # and another run took it meanwhile (whose turn it then waits for)
        with steps.holding(config, DECODE, "cdclake run --follow") as lease:
            while going() and not lease.lost:
                try:
                    mark = archive_mark(config)
                    if clock() >= retry_at if failures else mark != seen:
                        runs += 1
                        out = steps.run_once(config, params, spark=spark, quality=quality,
                                             stop=stop.is_set,
                                             run_id=f"{steps.safe_run_id(None)}-follow",
                                             **run_kwargs)
                        # a file still being copied into archive_dir: shipped by a later run
                        seen = None if out["steps"].get("ship", {}).get("pending") else mark
                        failures = 0
                        # a start LSN and a snapshot again are for the first run only
                        params = RunParams(tables=params.tables)
                        if on_run is not None:
                            on_run(out)
                except ConfigError:
                    raise
                except CdclakeError as exc:
                    failures += 1
                    pause = min(MAX_RETRY, config.follow_poll * 2 ** failures)
                    retry_at = clock() + pause
                    log.warning("follow: run failed (%s); trying again in %.0f s",
                                redact(str(exc)), pause)
                    if on_error is not None:
                        on_error(exc)
                stop.wait(config.follow_poll)
    return runs


def follow_until_stopped(config: Config, params: RunParams | None = None, *,
                         seconds: float | None = None, **kwargs: Any) -> int:
    """:func:`follow` as a process runs it: its Spark session started first (pyspark puts its
    own SIGINT handler in place), then SIGTERM and SIGINT taken (:func:`stop_signals`), for
    ``seconds`` or until a signal; how many runs it made. A second signal's
    KeyboardInterrupt goes to the caller. The session and its JVM end with it."""
    from cdclake.sparkenv.session import end

    params = check_params(params or RunParams())
    spark = follow_session(config)
    stop = threading.Event()
    try:
        with stop_signals(stop):
            return follow(config, params, stop=stop, spark=spark,
                          until=None if seconds is None else time.monotonic() + seconds,
                          **kwargs)
    finally:
        end()


def follow_for(config: Config, params: RunParams | None = None) -> dict[str, Any]:
    """The ``cdclake_follow`` DAG's Spark application: a follower for ``config.follow_for``
    seconds (or until SIGTERM), on the session spark-submit started; then the continuous DAG
    starts the next one. Returns how many runs it made."""
    runs = follow_until_stopped(config, params, seconds=config.follow_for)
    return {"runs": runs, "seconds": config.follow_for}
