"""Who can change the code PostgreSQL's archiver runs as ``cdclake wal-push``.

As root, cdclake builds the archive_command for the ``postgres`` user from a clone only root
may enter (README, first paragraph), so the command runs a copy of what wal-push imports.
Another local user (``nobody`` here) must never get their code run by the archiver: not by
making the copy's directory again once it is gone (tmpfiles ageing a copy under /var/tmp
allowed that), not through a directory above it or a file in it they may write to. The
command checks this at every start, before it imports anything; when the check fails it
refuses with one line naming the path, and the planted code never runs.

Each test runs the real archive_command as ``postgres`` the way the archiver does
(``sh -c`` with ``%p`` replaced, in the directory holding the file).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import cdclake
from tests.support.walfiles import write_segment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="builds the archive_command as root for the "
                       "postgres user and plants code as nobody: needs root"),
]

SERVER, OTHER = "postgres", "nobody"
#: what nobody plants: code that leaves a mark when it runs, as whoever runs it
PLANTED = "import os; open({mark!r}, 'w').write(f'planted code ran as uid {{os.getuid()}}')\n"
#: what nobody runs to plant it (sh: no interpreter of ours involved): every file it can
#: write, replacing what it may not edit where it may write to the directory
PLANT = """
root=$1 code=$2 planted=
mkdir -p "$root/cdclake" || exit 1
for name in sitecustomize.py cdclake/__init__.py cdclake/cli.py; do
    path=$root/$name
    if [ -e "$path" ] && [ ! -w "$path" ]; then rm -f "$path" 2>/dev/null; fi
    if printf '%s' "$code" 2>/dev/null >"$path"; then planted="$planted $name"; fi
done
[ -n "$planted" ] || { echo "could plant nothing in $root" >&2; exit 1; }
"""


def as_user(user: str, args: list[str], cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    pw = pwd.getpwnam(user)
    return subprocess.run(args, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})


@dataclass
class Archiver:
    """An archive_command built from a private clone, a file store postgres writes to, and a
    directory of segments standing for pg_wal."""

    command: str
    store: Path
    pg_wal: Path
    mark: Path  #: written by planted code if it ever runs
    segno: int = 1

    def archive(self) -> tuple[subprocess.CompletedProcess[str], Path]:
        """Run the command as the archiver would on a new segment."""
        segment = write_segment(self.pg_wal, 1, self.segno)
        self.segno += 1
        os.chmod(segment, 0o644)
        out = as_user(SERVER, ["/bin/sh", "-c", self.command.replace("%p", segment.name)],
                      cwd=self.pg_wal)
        return out, self.store / "wal" / segment.name

    def copy(self) -> Path:
        """The copy of cdclake the command imports: an argument, or a PYTHONPATH setting."""
        for word in shlex.split(self.command.removesuffix(" %p")):
            for value in (word, word.partition("=")[2]):
                if (value.startswith("/") and " " not in value
                        and (Path(value) / "cdclake" / "cli.py").is_file()):
                    return Path(value)
        raise AssertionError(f"the archive_command names no copy of cdclake: {self.command}")

    def plant(self, where: Path) -> subprocess.CompletedProcess[str]:
        """``nobody`` writes code of theirs at ``where`` (a copy of cdclake's layout)."""
        code = PLANTED.format(mark=str(self.mark))
        return as_user(OTHER, ["/bin/sh", "-c", PLANT, "plant", str(where), code])


def build(store: Path) -> str:
    """wal_push_command for postgres, called as root from a clone only root may enter: its
    sources and its interpreter reached through a 0700 directory."""
    private = Path(tempfile.mkdtemp(prefix="cdclake-private-clone-"))
    try:
        (private / "python").symlink_to(os.path.realpath(sys.executable))
        (private / "src").symlink_to(Path(cdclake.__file__).parents[1])
        site = sysconfig.get_paths()["purelib"]  # the dependencies; cdclake only in src
        script = ("import sys; from cdclake.archive.command import wal_push_command; "
                  "print(wal_push_command({'CDCLAKE_STORE_URL': sys.argv[1]}, run_as='postgres'))")
        out = subprocess.run([str(private / "python"), "-c", script, store.as_uri()], cwd="/",
                             env={**os.environ, "PYTHONPATH": f"{private / 'src'}:{site}"},
                             capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(private)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def archiver() -> Iterator[Archiver]:
    pw = pwd.getpwnam(SERVER)
    base = Path(tempfile.mkdtemp(prefix="cdclake-runtime-test-"))
    os.chmod(base, 0o755)
    store, pg_wal = base / "store", base / "pg_wal"
    for d in (store, pg_wal):
        d.mkdir()
        os.chown(d, pw.pw_uid, pw.pw_gid)
    archiver = Archiver(build(store), store, pg_wal, store / "planted-code-ran")
    try:
        yield archiver
    finally:
        shutil.rmtree(base)


def refused(out: subprocess.CompletedProcess[str], what: str) -> str:
    """wal-push refused: status 2, one line on stderr naming ``what``, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("cdclake wal-push: error: "), lines[0]
    assert what in lines[0], lines[0]
    return lines[0]


def test_a_removed_copy_cannot_be_made_again_by_another_user(archiver: Archiver) -> None:
    out, stored = archiver.archive()
    assert out.returncode == 0, out.stderr
    assert stored.is_file()
    copy = archiver.copy()
    try:
        shutil.rmtree(copy)  # tmpfiles' ageing, or an operator cleaning up
        planted = archiver.plant(copy)
        out, stored = archiver.archive()
        assert not archiver.mark.exists(), archiver.mark.read_text()
        assert planted.returncode != 0 and "Permission denied" in planted.stderr, (
            f"{OTHER} could make {copy}")
        refused(out, f"{copy} is missing")
        assert not stored.exists()
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        build(archiver.store)  # the copy again, for the tests after this one
        assert copy.is_dir()


@pytest.mark.parametrize("hole", ["directory-above", "group-writable-package", "file"])
def test_code_another_user_could_change_is_never_run(archiver: Archiver, hole: str) -> None:
    """A copy of the copy in a tree of the test's own, opened to ``nobody`` in one place;
    nobody uses the opening to plant code, and the command refuses to start."""
    original = archiver.copy()
    tree = Path(tempfile.mkdtemp(prefix="test-", dir=original.parent))
    try:
        os.chmod(tree, 0o755)
        copy = tree / "opened" / "runtime"
        shutil.copytree(original, copy)
        os.chmod(copy.parent, 0o755)
        archiver.command = archiver.command.replace(str(original), str(copy))
        out, _ = archiver.archive()
        assert out.returncode == 0, out.stderr  # the copy of the copy works as it is
        nobody = pwd.getpwnam(OTHER)
        if hole == "directory-above":
            os.chmod(copy.parent, 0o777)
            moved = as_user(OTHER, ["mv", str(copy), str(copy.with_name("moved"))])
            assert moved.returncode == 0, moved.stderr
            opening, planted = copy.parent, archiver.plant(copy)
        elif hole == "group-writable-package":
            opening = copy / "cdclake"
            os.chown(opening, 0, nobody.pw_gid)
            os.chmod(opening, 0o775)
            planted = archiver.plant(copy)
        else:
            opening = copy / "cdclake" / "cli.py"
            os.chmod(opening, 0o666)
            planted = archiver.plant(copy)
        assert planted.returncode == 0, planted.stderr  # the hole is real
        out, stored = archiver.archive()
        assert not archiver.mark.exists(), archiver.mark.read_text()
        line = refused(out, f"{opening} (")
        assert f"owner uid {os.stat(opening).st_uid}" in line
        assert not stored.exists()
    finally:
        shutil.rmtree(tree)
