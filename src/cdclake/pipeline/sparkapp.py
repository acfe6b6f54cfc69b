"""The Spark application :mod:`cdclake.pipeline.submit` submits: one step of a run, its result
(or its one-line error) written to the store key it was given.

``spark-submit … sparkapp.py <step> --params JSON --result KEY``. The configuration is the
``CDCLAKE_*`` environment (or ``CDCLAKE_CONFIG``), as in every task. Exit 0 with a result,
2 with an error: a traceback never stands in for the error line. The error's class goes with
it, so the task raises the very error ``cdclake run`` would; one cdclake did not foresee is
answered as an internal error (exit 1, as the CLI's), its traceback printed to stderr (the
task's log).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from cdclake.archive import open_store
from cdclake.config import Config
from cdclake.errors import CdclakeError, redact, unforeseen
from cdclake.pipeline import steps
from cdclake.pipeline.follow import follow_for
from cdclake.pipeline.params import RunParams
from cdclake.pipeline.submit import SPARK_STEPS

#: what each Spark step runs (:data:`cdclake.pipeline.submit.SPARK_STEPS`, in its order)
RUNS: dict[str, Callable[[Config, RunParams], dict[str, Any]]] = {
    "snapshot": steps.snapshot, "decode": steps.decode, "merge": steps.merge,
    "follow": follow_for}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cdclake-sparkapp")
    p.add_argument("step", choices=SPARK_STEPS)
    p.add_argument("--params", default="{}")
    p.add_argument("--result", required=True)
    args = p.parse_args(argv)
    try:
        config = Config.load()
    except CdclakeError as exc:  # no store to answer in: the line is in the task's log
        print(f"cdclake {args.step}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    answer: dict[str, Any]
    try:
        run = RUNS[args.step]
        answer = {"result": run(config, RunParams.from_mapping(json.loads(args.params)))}
    except CdclakeError as exc:
        answer = {"error": redact(str(exc)), "type": type(exc).__name__}
    except Exception as exc:  # a bug: the line for the task, the traceback for its log
        traceback.print_exc()
        answer = {"error": unforeseen(exc)}
    open_store(config).put(args.result, json.dumps(answer).encode())
    if "error" not in answer:
        return 0
    if "type" not in answer:  # a bug
        print(f"cdclake {args.step}: {answer['error']} (a bug: its traceback is above)",
              file=sys.stderr)
        return 1
    print(f"cdclake {args.step}: error: {answer['error']}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
