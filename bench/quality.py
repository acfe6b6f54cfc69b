"""What checking a change stream with GX costs per table, without the data's share.

A pipeline run checks each table's batch with the change-stream suite and renders Data Docs
once at its end. Most batches are small, so the fixed price per table (GX's validation graph,
its stores, the pages) is what a run pays: this measures it on tiny batches (the quality
builders' good stream), as the CPU seconds of ``--phases`` checks of ``--tables`` tables in a
new reports home (a context opened per check, as ``cdclake run`` opens one per step), averaged
over ``--homes`` homes after one home to warm the process (GX's import, compiled templates).

Every process that validates first imports GX: its CPU is measured too, in new interpreters
(``--imports`` of each, alternating), as cdclake imports it (:mod:`cdclake.quality.deferred`)
and as a plain ``import great_expectations`` — after what a ``cdclake run`` has imported by
then (pyarrow, pandas, pyspark, pyiceberg), so only GX's own share is counted.

    .venv/bin/python bench/quality.py [--tables 3] [--phases 2] [--homes 8] [--imports 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cdclake.config import Config
from cdclake.quality.context import QualityContext
from cdclake.quality.runner import validate_stream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support
from tests.support import quality_builders as builders


def check_home(tables: int, phases: int) -> float:
    """CPU seconds of ``phases`` checks of ``tables`` tables in a new home."""
    rels = {f"public.t{i}": builders.relation(f"public.t{i}", oid=16500 + i)
            for i in range(tables)}
    streams = {name: builders.stream(rel, builders.good_changes()) for name, rel in rels.items()}
    config = Config(home=Path(tempfile.mkdtemp(prefix="cdclake-bench-quality-")))
    started = time.process_time()
    for _ in range(phases):
        context = QualityContext.for_config(config)
        with context.publishing_once():
            report = validate_stream(config, streams, rels, context=context)
        assert report.success, report.summary()
    return time.process_time() - started


#: a new interpreter's CPU seconds for importing GX, after a run's other imports
IMPORT = """
import json, resource, sys
import pandas, pyarrow, pyiceberg.catalog, pyspark.sql
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
started = cpu()
if sys.argv[1] == "deferred":
    from cdclake.quality import deferred
    deferred.great_expectations()
else:
    import great_expectations
print(json.dumps(cpu() - started))
"""


def import_cpu(how: str) -> float:
    out = subprocess.run([sys.executable, "-c", IMPORT, how], check=True,
                         capture_output=True, text=True)
    return float(json.loads(out.stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=3)
    ap.add_argument("--phases", type=int, default=2)
    ap.add_argument("--homes", type=int, default=8)
    ap.add_argument("--imports", type=int, default=5)
    args = ap.parse_args()
    imports: dict[str, list[float]] = {"deferred": [], "plain": []}
    for _ in range(args.imports):
        for how, seconds in imports.items():
            seconds.append(import_cpu(how))
    print("GX's import in a new process: "
          + ", ".join(f"{how} {min(s):.2f} s of CPU" for how, s in imports.items())
          + f" (best of {args.imports})")
    check_home(args.tables, args.phases)  # the import, the compiled templates
    seconds = [check_home(args.tables, args.phases) for _ in range(args.homes)]
    mean = sum(seconds) / len(seconds)
    print(f"{args.phases} checks of {args.tables} tables in a new home: {mean:.3f} s of CPU "
          f"({mean / args.phases / args.tables * 1000:.0f} ms a table), "
          f"mean of {args.homes} homes")


if __name__ == "__main__":
    main()
