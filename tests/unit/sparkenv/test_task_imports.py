"""What an executor's Python worker imports to run a task: only the task's own side.

Spark pickles a task body by value but the module-level functions and classes it uses by
reference, so the worker imports their modules. The merge's and the snapshot's driver
modules import pyiceberg's catalog, SQL and the session (half a second and more per worker,
for every worker of every job): their task bodies must not reach them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyarrow import fs as pafs
from pyspark import cloudpickle
from pyspark.accumulators import Accumulator

from cdclake.lake.sparkparts import read_parts
from cdclake.snapshot.chunks import ChunkTotals, counted_copy
from cdclake.sparkenv.tasks import task

UNPICKLE = """
import pickle, sys
pickle.loads(sys.stdin.buffer.read())
print(" ".join(sorted(m for m in sys.modules if m.startswith("cdclake"))))
"""


def _modules_to_run(body: object, tmp_path: Path) -> set[str]:
    data = cloudpickle.dumps(body)
    out = subprocess.run([sys.executable, "-c", UNPICKLE], input=data, capture_output=True,
                         check=True, cwd=tmp_path)
    return set(out.stdout.decode().split())


def test_the_spark_merges_read_of_a_batch_imports_no_merge(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    loaded = _modules_to_run(task(read_parts(pafs.LocalFileSystem(), schema)), tmp_path)
    assert "cdclake.lake.sparkparts" in loaded
    assert not loaded & {"cdclake.lake.sparkmerge", "cdclake.lake.tables",
                         "cdclake.lake.catalog"}, loaded


def test_a_snapshot_copy_task_imports_no_driver(tmp_path: Path) -> None:
    totals = Accumulator(0, {}, ChunkTotals())
    loaded = _modules_to_run(task(counted_copy(totals)), tmp_path)
    assert "cdclake.snapshot.chunks" in loaded
    assert not loaded & {"cdclake.snapshot.driver", "cdclake.sparkenv.session"}, loaded
