"""GX's import defers the modules cdclake's suites never use (cdclake.quality.deferred): they
are made, and run their code when first read — and only while GX is imported."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.quality import deferred


@pytest.fixture
def probes(tmp_path: Path) -> Iterator[Path]:
    """Two modules that note in ``ran`` (a module of its own) when their code runs."""
    (tmp_path / "probe_ran.py").write_text("ran = []\n")
    for name in ("probe_used", "probe_heavy"):
        (tmp_path / f"{name}.py").write_text(
            f"import probe_ran\nprobe_ran.ran.append({name!r})\nVALUE = {name!r}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("probe_ran", "probe_used", "probe_heavy"):
            sys.modules.pop(name, None)


def test_a_deferred_module_runs_its_code_when_first_read(probes: Path) -> None:
    import probe_ran

    finder = deferred._Deferring(["probe_heavy"])
    sys.meta_path.insert(0, finder)
    try:
        import probe_heavy
        import probe_used
    finally:
        sys.meta_path.remove(finder)
    assert probe_ran.ran == ["probe_used"]  # the deferred one exists, its code not run yet
    assert probe_heavy.VALUE == "probe_heavy"
    assert probe_ran.ran == ["probe_used", "probe_heavy"]
    assert probe_used.VALUE == "probe_used"


def test_a_module_that_is_nowhere_is_still_an_import_error(probes: Path) -> None:
    finder = deferred._Deferring(["probe_missing"])
    sys.meta_path.insert(0, finder)
    try:
        with pytest.raises(ModuleNotFoundError, match="probe_missing"):
            import probe_missing  # noqa: F401
    finally:
        sys.meta_path.remove(finder)


def test_great_expectations_is_the_module_once_imported() -> None:
    gx = deferred.great_expectations()
    assert gx is sys.modules["great_expectations"]
    assert deferred.great_expectations() is gx
    assert not any(isinstance(f, deferred._Deferring) for f in sys.meta_path)
