"""GX's import, without the two libraries it loads for expectations cdclake never runs.

Importing ``great_expectations`` imports every expectation GX has, and one of them, the
KL-divergence expectation, imports ``scipy.stats`` and ``altair`` (for its statistics and
its charts) at module level: 0.9 s of the 2.3 s of CPU that GX's import costs on this
project's machine, paid by every process that validates — each ``cdclake run``, each
Airflow task that checks a batch. cdclake's suites use neither. So while GX is imported,
those two modules are made with the standard library's lazy loader
(:class:`importlib.util.LazyLoader`): the module object exists, and runs its code on the
first attribute anyone reads — a suite that used that expectation would load them then.
Nothing else is deferred, and nothing is deferred for imports after GX's.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

#: what GX imports at start-up that cdclake's suites never use (see the module docstring)
DEFERRED = ("scipy.stats", "altair")


class _Deferring(importlib.abc.MetaPathFinder):
    """Finds ``names`` as every other finder would, then defers their execution."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


def great_expectations() -> ModuleType:
    """The ``great_expectations`` module, imported with :data:`DEFERRED` deferred if this
    is its first import in the process."""
    module = sys.modules.get("great_expectations")
    if module is not None:
        return module
    finder = _Deferring(DEFERRED)
    sys.meta_path.insert(0, finder)
    try:
        import great_expectations
    finally:
        sys.meta_path.remove(finder)
    return great_expectations
