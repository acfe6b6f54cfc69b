"""The copies another user's processes run from, and the check that guards them."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.archive import runtime
from cdclake.archive.boot import above, below, unsafe
from cdclake.errors import CdclakeError

ME = {os.getuid()}

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root makes the copies (for the "
                             "postgres user's processes)")


def _fill(calls: list[Path]):
    def fill(tmp: Path) -> None:
        calls.append(tmp)
        (tmp / "pkg").mkdir(parents=True)
        (tmp / "pkg" / "mod.py").write_text("X = 1\n")
        (tmp / "tool").write_text("#!/bin/sh\n")
        os.chmod(tmp / "tool", 0o700)
        os.chmod(tmp / "pkg", 0o700)
    return fill


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small copy-like tree, as a copy is made: directories 0755, files 0644."""
    root = tmp_path / "copy"
    (root / "pkg" / "sub").mkdir(parents=True)
    for f in ("pkg/__init__.py", "pkg/sub/mod.py", "top.py"):
        (root / f).write_text("X = 1\n")
    for d, _dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    return root


@pytest.fixture
def prefix() -> Iterator[str]:
    """A name of our own under the real ROOT, removed afterwards."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    for path in runtime.ROOT.glob(f"{name}-*"):
        shutil.rmtree(path)


def test_above_is_the_path_and_every_directory_over_it() -> None:
    assert above("/var/lib/cdclake/runtime-1") == [
        "/", "/var", "/var/lib", "/var/lib/cdclake", "/var/lib/cdclake/runtime-1"]
    assert above("/usr") == ["/", "/usr"]


def test_a_tree_only_its_owner_may_change_passes(tree: Path) -> None:
    assert sorted(below(str(tree))) == sorted(str(tree / p) for p in (
        "pkg", "pkg/sub", "pkg/__init__.py", "pkg/sub/mod.py", "top.py"))
    assert unsafe([str(tree), *below(str(tree))], ME) is None


@pytest.mark.parametrize(("path", "mode", "shown"), [
    ("pkg/sub/mod.py", 0o664, "-rw-rw-r--"),
    ("top.py", 0o646, "-rw-r--rw-"),
    ("pkg/sub", 0o775, "drwxrwxr-x"),
    ("pkg", 0o1777, "drwxrwxrwt"),  # a sticky directory still lets others add modules
])
def test_what_group_or_others_may_write_is_named(tree: Path, path: str, mode: int,
                                                 shown: str) -> None:
    os.chmod(tree / path, mode)
    assert unsafe(below(str(tree)), ME) == f"{tree / path} ({shown}, owner uid {os.getuid()})"


def test_what_another_user_owns_is_named(tree: Path) -> None:
    other = os.getuid() + 1
    assert unsafe(below(str(tree)), {other}) == (
        f"{tree / 'pkg'} (drwxr-xr-x, owner uid {os.getuid()})")


def test_a_symlink_is_named(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.py").write_text("X = 2\n")
    (tree / "pkg" / "link.py").symlink_to(tmp_path / "elsewhere.py")
    assert unsafe(below(str(tree)), ME) == (
        f"{tree / 'pkg' / 'link.py'} (lrwxrwxrwx, owner uid {os.getuid()})")


def test_the_bootstrap_survives_postgresql_conf_and_archive_command() -> None:
    """postgresql.conf reads a backslash as an escape and a quote ends the value;
    archive_command replaces %p, %f, %r and %%: the text has none of them."""
    assert not set("'\\%\n") & set(runtime.BOOTSTRAP)


def test_import_paths_leave_out_the_standard_library() -> None:
    paths = runtime.import_paths()
    assert paths and not any(Path(p).resolve().is_relative_to(runtime._STDLIB) for p in paths)
    assert any((Path(p) / "cdclake" / "cli.py").is_file() for p in paths)


@as_root
def test_made_once_readable_by_anyone(prefix: str) -> None:
    calls: list[Path] = []
    first = runtime.shared_copy(prefix, "d1", _fill(calls))
    assert first == runtime.ROOT / f"{prefix}-d1"
    assert runtime.shared_copy(prefix, "d1", _fill(calls)) == first
    assert len(calls) == 1
    assert (first / "pkg").stat().st_mode & 0o777 == 0o755
    assert (first / "pkg" / "mod.py").stat().st_mode & 0o777 == 0o644
    assert (first / "tool").stat().st_mode & 0o777 == 0o755
    assert runtime.ROOT.stat().st_mode & 0o777 == 0o755 and runtime.ROOT.stat().st_uid == 0
    assert not list(runtime.ROOT.glob(f".{prefix}-*"))  # no temporary left


@as_root
@pytest.mark.parametrize("opened", ["", "pkg/mod.py"])
def test_a_copy_others_may_write_is_refused(prefix: str, opened: str) -> None:
    copy = runtime.shared_copy(prefix, "d2", _fill([]))
    os.chmod(copy / opened, 0o777 if not opened else 0o666)
    with pytest.raises(CdclakeError, match=(
            f"^{copy} is not safe to run another user's processes from: {copy / opened} "
            r"\((d|-)rw.rw.rw., owner uid 0\) could be changed by a user other than root")):
        runtime.shared_copy(prefix, "d2", _fill([]))
