"""The shared copies wal-push and the local server run from when the checkout is private."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdclake.archive import runtime
from cdclake.errors import CdclakeError


def _fill(calls: list[Path]):
    def fill(tmp: Path) -> None:
        calls.append(tmp)
        (tmp / "pkg").mkdir(parents=True)
        (tmp / "pkg" / "mod.py").write_text("X = 1\n")
        (tmp / "tool").write_text("#!/bin/sh\n")
        os.chmod(tmp / "tool", 0o700)
        os.chmod(tmp / "pkg", 0o700)
    return fill


def test_made_once_readable_by_anyone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "ROOT", tmp_path)
    calls: list[Path] = []
    first = runtime.shared_copy("x", "d1", _fill(calls))
    assert first == tmp_path / "x-d1"
    assert runtime.shared_copy("x", "d1", _fill(calls)) == first
    assert len(calls) == 1
    assert (first / "pkg").stat().st_mode & 0o777 == 0o755
    assert (first / "pkg" / "mod.py").stat().st_mode & 0o777 == 0o644
    assert (first / "tool").stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-d1"]  # no temporary left


def test_a_copy_others_may_write_is_refused(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "ROOT", tmp_path)
    planted = tmp_path / "x-d2"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(CdclakeError, match="not this user's own copy"):
        runtime.shared_copy("x", "d2", _fill([]))
