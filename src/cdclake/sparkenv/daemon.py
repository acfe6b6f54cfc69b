"""The Python workers' daemon of a session on this host: pyspark's own (``pyspark.daemon``),
given two things before it forks its first worker.

Spark starts one daemon per application and executor; the daemon forks a worker per
concurrent task, and each worker imports what its tasks' pickled functions name. So:

- pyspark comes from the installed package, whose bytecode pip compiled, not from the
  ``$SPARK_HOME/python/lib/pyspark.zip`` Spark puts first on a worker's path: Python caches
  no bytecode for a zip, and compiled pyspark anew at every daemon's start (0.28 s of CPU of
  the daemon's 0.45 on this project's machine). Only a zip of the very package installed
  here is passed over (:func:`installed_zips`): another Spark's stays as Spark set it.
- the modules ``CDCLAKE_TASK_MODULES`` names (the session's task bodies',
  :func:`cdclake.sparkenv.session.session`'s ``tasks``) are imported once, here, so the
  workers forked from this process find them loaded instead of each importing them;
- what is loaded by then is frozen out of the garbage collector (``gc.freeze``): a reused
  worker runs a full ``gc.collect()`` after every task (pyspark's daemon), which otherwise
  walks every object inherited from here, and in doing so writes to every page holding one,
  so the fork's shared pages are copied into each worker. Frozen, a worker's collection walks
  only the objects it made itself (the suite's workers spent more CPU in those collections
  than in decoding).

Only a session whose executors are this host's Python, with cdclake installed, runs it
(``spark.python.daemon.module``, set for ``local`` masters): another host's executors may not
have cdclake at all (they get it as a zip, with each task).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path

#: this module, as ``spark.python.daemon.module`` names it
DAEMON = "cdclake.sparkenv.daemon"
#: the session's task modules, comma-separated (``spark.executorEnv``, so this process has it)
MODULES = "CDCLAKE_TASK_MODULES"


def installed_zips(path: list[str]) -> set[str]:
    """The entries of ``path`` that are the zips of the pyspark and py4j installed in
    site-packages (``<pyspark>/python/lib/…``): the same code, without cached bytecode."""
    plain = [p for p in path if not p.endswith(".zip")]
    spec = PathFinder.find_spec("pyspark", plain)
    if spec is None or spec.origin is None:
        return set()
    lib = Path(spec.origin).parent / "python" / "lib"
    ours = {p for p in path if Path(p).parent == lib}
    if PathFinder.find_spec("py4j", plain) is None:  # py4j only in its zip: keep it
        ours = {p for p in ours if "py4j" not in Path(p).name}
    return ours


def main() -> None:
    zips = installed_zips(sys.path)
    sys.path[:] = [p for p in sys.path if p not in zips]
    for name in filter(None, os.environ.get(MODULES, "").split(",")):
        importlib.import_module(name)
    if "pyarrow" in sys.modules:
        # pyarrow imports pandas the first time it converts Python objects (its pandas
        # shim), which every task building an Arrow column does: once here, not per worker
        importlib.import_module("pandas")
    from pyspark.daemon import manager

    gc.freeze()
    manager()


if __name__ == "__main__":
    main()
