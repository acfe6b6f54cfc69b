"""A zip on the path is read again by ``importlib.invalidate_caches()`` only when it changed."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from cdclake.zipimports import keep_zip_directories


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 has the rule built in")
def test_an_unchanged_archive_is_not_read_again(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipmod_a.py", "X = 1\n")
    monkeypatch.syspath_prepend(str(archive))
    keep_zip_directories()
    keep_zip_directories()  # installing twice wraps once
    assert importlib.import_module("zipmod_a").X == 1
    reads: list[str] = []
    real = zipimport._read_directory  # type: ignore[attr-defined]
    monkeypatch.setattr(zipimport, "_read_directory",
                        lambda path: reads.append(path) or real(path))
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) <= 1  # the first call may record it; then none
    reads.clear()
    importlib.invalidate_caches()
    assert reads == []
    # a changed archive is read again: what it now holds can be imported
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("zipmod_b.py", "Y = 2\n")
    st = archive.stat()
    os.utime(archive, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    importlib.invalidate_caches()
    assert str(archive) in reads
    assert importlib.import_module("zipmod_b").Y == 2
    for name in ("zipmod_a", "zipmod_b"):
        sys.modules.pop(name, None)
