"""``cdclake run``, ``cdclake snapshot`` and ``cdclake status``: the pipeline from a shell or
cron, no Airflow.

``run`` calls the same step functions the DAG's tasks call, in the same order, so a run from
the shell and a DAG run leave the store and the lake in the same state.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.lsn import parse_lsn
from cdclake.pipeline.params import RunParams


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start-lsn", type=parse_lsn,
                   help="first batch of a new stream only: emit transactions committing at or "
                        "after this LSN (e.g. the LSN `cdclake source install` printed)")
    p.add_argument("--end-lsn", type=parse_lsn,
                   help="decode no further than the segment holding this LSN (e.g. 0/5000000)")
    p.add_argument("--until-segment", help="decode no further than this segment (inclusive)")
    p.add_argument("--tables", default="",
                   help="comma-separated schema.table to merge now (others catch up next run)")
    p.add_argument("--dry-run", action="store_true",
                   help="plan and check only: upload, write and commit nothing")
    p.add_argument("--run-id", help="name of the run's report (default: run-<UTC time>)")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--follow", action="store_true",
                   help="keep running: one process and Spark session run the steps whenever "
                        "new segments are archived (CDCLAKE_FOLLOW_POLL), until SIGTERM or "
                        "Ctrl-C")


def run_run(args: argparse.Namespace, config: Config) -> int:
    from cdclake.pipeline.steps import run_once

    params = RunParams.from_mapping({
        "start_lsn": args.start_lsn, "end_lsn": args.end_lsn,
        "until_segment": args.until_segment, "tables": args.tables, "dry_run": args.dry_run})

    def progress(name: str, result: dict[str, Any]) -> None:
        if not args.json:
            print(f"{name}: {describe(name, result)}", file=sys.stderr)

    def snapshot_progress(line: str) -> None:
        if not args.json:
            print(line, file=sys.stderr)

    def show(result: dict[str, Any]) -> None:  # also when a table's merge failed
        if args.json:
            print(json.dumps(result, indent=2, sort_keys=True, default=str))
            return
        for source, m in sorted(result["mirrors"].items()):
            held = f"; QUARANTINED: {m['quarantined']}" if m.get("quarantined") else ""
            print(f"{source} -> {m['mirror']}: {m['rows']} row(s), commit LSN "
                  f"{m['commit_lsn']}{held}")
        for warning in result.get("inexact", {}).values():
            print(f"WARNING: {warning}")
        if result.get("data_docs_index"):
            print(f"Data Docs: {result['data_docs_index']}")
        if result.get("report_file"):
            print(f"report: {result['report_file']}")

    if args.follow:
        return _follow(args, config, params, progress, snapshot_progress)
    run_once(config, params, run_id=args.run_id, on_step=progress,
             on_progress=snapshot_progress, on_report=show)
    return 0


def _follow(args: argparse.Namespace, config: Config, params: RunParams,
            on_step: Any, on_progress: Any) -> int:
    """``cdclake run --follow``: a line per step as a single run prints them, a line per run
    (or its report as one JSON line with ``--json``); a failed run's error in one line, then
    the follower goes on. Ends 0 on SIGTERM or SIGINT."""
    from cdclake.errors import redact
    from cdclake.pipeline.follow import follow_until_stopped

    if args.run_id:
        raise ConfigError("--run-id names one run's report: --follow names each of its own")

    def done(report: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(report, sort_keys=True, default=str), flush=True)
            return
        stopped = report["steps"].get("stopped_before")
        took = report["steps"]["seconds"]
        steps = ", ".join(f"{k} {v:.1f}" for k, v in took.items())
        print(f"run {report['run_id']}: stream merged up to {report['merged_end_lsn']} in "
              f"{sum(took.values()):.1f} s ({steps})"
              + (f"; stopped before {stopped}" if stopped else ""), flush=True)

    def failed(exc: Exception) -> None:
        print(f"cdclake run: error: {redact(str(exc))} (--follow tries again)", file=sys.stderr,
              flush=True)

    try:
        runs = follow_until_stopped(config, params, on_run=done, on_error=failed,
                                    on_step=on_step, on_progress=on_progress)
    except KeyboardInterrupt:
        print("cdclake run: stopped; the step under way was abandoned (the next run "
              "finishes it)", file=sys.stderr)
        return 0
    print(f"cdclake run: stopped after {runs} run(s)", file=sys.stderr)
    return 0


def describe(step: str, r: dict[str, Any]) -> str:
    """One line per step for people watching a run."""
    if step == "ship":
        return r.get("summary") or r.get("reason", "")
    if step == "snapshot":
        if r.get("skipped"):
            return r["reason"]
        if not r["tables"]:
            return "every table in scope has a mirror"
        return (f"{len(r['tables'])} table(s), {r['rows']} row(s) copied at "
                f"{r['snapshot']['lsn']} ({r['rows_per_second']} rows/s)")
    if step == "decode":
        if r.get("batch") is None:
            return r.get("waiting") or "nothing new in the archive"
        names = r.get("batches") or [r["batch"]]
        what = f"batch {names[0]}" if len(names) == 1 else \
            f"{len(names)} batches {names[0]}..{names[-1]}"
        return (f"{what}: {r['commits']} commit(s) {r['start_lsn']}..{r['end_lsn']} from "
                f"{len(r['segments'])} segment(s)")
    if step == "validate_stream":
        return f"{sum(len(b['decoded_batches']) for b in r['batches'])} batch(es) checked"
    if step == "merge":
        from cdclake.pipeline.steps import merged_batches

        n = len(merged_batches(r))
        line = (f"{n} batch(es) {'would be ' if r['dry_run'] else ''}merged; stream merged "
                f"up to {r['end_lsn']}")
        failed = sorted({f["table"] for f in r.get("failed", ())})
        if failed:
            line += f"; FAILED (retried by the next run): {', '.join(failed)}"
        for q in r.get("quarantined", ()):
            line += f"; QUARANTINED {q['table']}: {q['reason']}"
        return line
    if step == "validate_tables":
        return r.get("reason") or f"{len(r['tables'])} mirror(s) checked"
    return ""


def add_snapshot_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tables", default="",
                   help="comma-separated schema.table to snapshot again (default: every "
                        "table in scope)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run_snapshot(args: argparse.Namespace, config: Config) -> int:
    """Replace mirrors by a fresh initial snapshot; the next run's merge hands over."""
    from cdclake.pipeline.params import table_list
    from cdclake.snapshot.driver import snapshot_tables

    tables = table_list(args.tables)
    RunParams(snapshot_tables=tables).check()
    result = snapshot_tables(config, replace=tables, replace_all=not tables, missing=False,
                             progress=lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
    elif not result["tables"]:
        print("no table to snapshot")
    else:
        for t in result["tables"]:
            print(f"{t['table']} -> {t['mirror']}: {t['rows']} row(s) in {t['chunks']} "
                  f"chunk(s), Iceberg snapshot {t['snapshot_id']}")
        print(f"snapshot at LSN {result['snapshot']['lsn']}: {result['rows']} row(s) in "
              f"{result['seconds']} s ({result['rows_per_second']} rows/s)")
    return 0


def add_status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print everything as JSON")


def run_status(args: argparse.Namespace, config: Config) -> int:
    """Exit 1 when decoding is stopped (:func:`cdclake.pipeline.status.stalled`), so a
    monitor running ``cdclake status`` hears of it; 2 is left to status failing itself."""
    from cdclake.pipeline.status import format_status, stalled, status

    data = status(config)
    print(json.dumps(data, indent=2, sort_keys=True, default=str) if args.json
          else format_status(data))
    return 1 if stalled(data) else 0
