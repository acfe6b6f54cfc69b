"""Zip archives on a Python worker's path read once, not before every task.

Installed by every task body cdclake gives Spark (:func:`cdclake.sparkenv.tasks.task`).

pyspark's worker calls ``importlib.invalidate_caches()`` before every task it runs. In Python
3.11 that makes every zip importer on the path read its archive's whole directory again, in
Python: the worker's path holds pyspark's own zip (one importer per package imported from it),
py4j's, and Spark's core jar (some 5,000 entries). Measured here, a task that does nothing took
100–120 ms, most of it there; a decode batch runs dozens of tasks. Python 3.12 reads an
archive's directory again only when the file changed (its size or modification time); this
gives 3.11 the same rule.
"""

from __future__ import annotations

import os
import sys
import zipimport
from typing import Any

#: archive path -> (size, mtime in ns) when its directory was last read
_read_at: dict[str, tuple[int, int]] = {}


def keep_zip_directories() -> None:
    """Install the rule in this process (once; nothing to do on Python 3.12 and later)."""
    cls: Any = zipimport.zipimporter
    if sys.version_info >= (3, 12) or getattr(cls.invalidate_caches, "keeps", False):
        return
    reread = cls.invalidate_caches

    def invalidate_caches(self: Any) -> None:
        try:
            st = os.stat(self.archive)
        except OSError:
            reread(self)
            return
        stamp = (st.st_size, st.st_mtime_ns)
        files = zipimport._zip_directory_cache.get(self.archive)  # type: ignore[attr-defined]
        if files is not None and _read_at.get(self.archive) == stamp:
            self._files = files
            return
        reread(self)
        _read_at[self.archive] = stamp

    invalidate_caches.keeps = True  # type: ignore[attr-defined]
    cls.invalidate_caches = invalidate_caches
