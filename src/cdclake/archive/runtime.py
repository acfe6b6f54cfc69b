"""What another user runs of ours: copies only root can change, checked before they are used.

PostgreSQL runs ``archive_command`` as the cluster's owner (``postgres``). When cdclake runs
as root for that user, the command must not run code from the checkout (a clone in root's
home that user cannot enter, or one anywhere another user could change) nor from a directory
another user can make again: a copy under the world-writable ``/var/tmp`` was trusted after
its creation, so once tmpfiles aged it away another local user made a directory of the same
name and the archiver ran their code. So:

- the copies live under :data:`ROOT` (``/var/lib/cdclake``), made by root: the packages
  wal-push imports (cdclake itself, boto3 and botocore with their data, the compression
  codecs), named by a digest of the copied files so an unchanged set is copied once, and the
  embedded PostgreSQL 18 installation (:mod:`cdclake.local.postgres`);
- the archive_command runs the system interpreter isolated (``-I``: no ``PYTHON*``
  variables, no user site, no script directory; ``-S``: no site-packages, no ``.pth`` files,
  no ``sitecustomize``) with :data:`BOOTSTRAP`, which checks before it imports anything from
  the copy that the copy, everything in it, every directory above it and above the
  interpreter's own library is owned by root or the server's user and writable by no one
  else — at every start, since a check made once when the command was built says nothing
  about the day the archiver runs it.

The rule is :mod:`cdclake.archive.boot`'s (standard library only): the command runs that
file's text from the copy and this module imports the same functions, so the check made here
(copies, the interpreter) and the one the archiver runs cannot drift apart. A symlink fails
it (its target is not checked, and its mode reads as writable by anyone); the copies hold
none.
"""

from __future__ import annotations

import compileall
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

from cdclake.archive import boot
from cdclake.errors import CdclakeError

#: what wal-push runs: the CLI, the push, both stores and the codecs it may load lazily
MODULES = ("cdclake.cli", "cdclake.archive.push", "cdclake.archive.s3",
           "cdclake.archive.local", "zstandard")
#: where the copies live: root's, like every directory above it (never aged by tmpfiles)
ROOT = Path("/var/lib/cdclake")
#: the interpreter's own library (lib-dynload under it), which the copies leave out
_STDLIB = Path(sysconfig.get_path("stdlib")).resolve()

#: ``python -I -S -c BOOTSTRAP COPY COMMAND ARGS...`` runs ``cdclake COMMAND ARGS...`` from
#: the directory COPY once no other user than root and the one running it could change what
#: it imports: it checks the path to COPY's ``cdclake/archive/boot.py`` and the file itself,
#: runs that file (:func:`boot.enter` checks the rest) and imports the CLI. Else one line and
#: exit status 2 (PostgreSQL keeps the WAL and calls again). One short line, without a
#: quote, backslash or percent sign: it travels in postgresql.conf and through
#: archive_command's ``%`` escapes, and PostgreSQL 15 cuts archive_command at 1023 bytes.
BOOTSTRAP = (
    'import os,stat,sys;b=sys.argv[1]+"/cdclake/archive/boot.py";'
    'w=next((q for q in ["/",*(b[:i] for i in range(1,len(b)) if b[i]=="/"),b] if not '
    'os.path.lexists(q) or (s:=os.lstat(q)).st_uid not in(0,os.getuid()) or s.st_mode&0o22),0);'
    'w and sys.exit(print(f"cdclake {sys.argv[2]}: error: not running cdclake from '
    '{sys.argv[1]}: {w} "+(os.path.lexists(w) and f"({stat.filemode(s.st_mode)}, owner uid '
    '{s.st_uid}) may be changed by a user other than root and uid {os.getuid()}" or "is '
    'missing"),file=sys.stderr) or 2);'
    'exec(open(b,"rb").read());from cdclake.cli import main;sys.exit(main())')


def unsafe(path: str | Path, ids: set[int], *, tree: bool = False) -> str | None:
    """What makes ``path`` (resolved) unsafe to run code from as a user of ``ids``: the first
    of it, the directories above it and, with ``tree``, everything under it, that another
    user owns or that group or others may write to (:func:`boot.unsafe`, the rule the
    archive_command applies); None when there is nothing."""
    p = os.path.realpath(path)
    return boot.unsafe(boot.above(p) + (boot.below(p) if tree else []), ids)


def _loaded_tops(roots: list[Path]) -> dict[Path, Path]:
    """Top-level package directories (or single-file modules) under ``roots`` that a fresh
    interpreter loads for wal-push: path -> the root it is under. A fresh one, so that what
    this process imported for other reasons (a test run's modules) is not copied, and only
    what it imports past its start (``site`` and ``.pth`` files do not run under ``-S``). A
    module from neither ``roots`` nor the standard library would be missing: refused."""
    probe = ("import importlib, sys\n"
             "started = set(sys.modules)\n"
             f"for name in {MODULES!r}: importlib.import_module(name)\n"
             "import boto3\n"
             "boto3.session.Session(region_name='us-east-1').client('s3')\n"  # lazy parts
             "print('\\n'.join(getattr(m, '__file__', None) or '' "
             "for n, m in list(sys.modules.items()) if n not in started))")
    try:
        out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True,
                             text=True, check=True, timeout=120, cwd="/").stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CdclakeError(f"cannot list what wal-push imports with {sys.executable}: "
                           f"{exc}") from exc
    innermost_first = sorted(roots, key=lambda r: len(r.parts), reverse=True)
    tops: dict[Path, Path] = {}
    for file in filter(None, out.splitlines()):
        path = Path(file).resolve()
        root = next((r for r in innermost_first if path.is_relative_to(r)), None)
        if root is not None:
            tops[root / path.relative_to(root).parts[0]] = root
        elif not path.is_relative_to(_STDLIB):
            raise CdclakeError(f"wal-push imports {path}, which is in none of "
                               f"{', '.join(map(str, roots))}: it cannot be copied")
    return tops


def _digest(tops: dict[Path, Path]) -> str:
    h = hashlib.sha256(sys.version.encode())
    for top in sorted(tops):
        files = sorted(top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                st = f.stat()
                h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def import_paths() -> list[str]:
    """This interpreter's import path less its standard library: where wal-push's packages
    come from (site-packages, ``.pth`` and PYTHONPATH entries, a source directory)."""
    return [p for p in sys.path
            if p and os.path.isdir(p) and not Path(p).resolve().is_relative_to(_STDLIB)]


def runtime_copy() -> Path:
    """``ROOT/runtime-<digest>``: the packages wal-push imports from :func:`import_paths`,
    made if missing; run by :data:`BOOTSTRAP`."""
    tops = _loaded_tops([Path(p).resolve() for p in import_paths()])

    def fill(tmp: Path) -> None:
        tmp.mkdir()
        for top in tops:
            if top.is_dir():
                shutil.copytree(top, tmp / top.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(top, tmp / top.name)
        # the server's user cannot write bytecode into the copy: compiled now, each start
        # of wal-push takes half the time (copy2 kept the sources' times, so it is valid)
        compileall.compile_dir(tmp, quiet=2)

    return shared_copy("runtime", _digest(tops), fill)


def shared_copy(prefix: str, digest: str, fill: Callable[[Path], None]) -> Path:
    """``ROOT/<prefix>-<digest>``, filled by ``fill`` once, readable by anyone, changeable by
    root alone; only root makes one (the copies are for another user's processes).

    The directory is made under a temporary name and renamed into place, so a reader never
    sees half a copy. Before it is returned, made now or long ago, it is checked as the
    archive_command checks it (:func:`unsafe`, trusting root only): a copy another user
    could have changed is refused, naming the path that says so."""
    if os.geteuid() != 0:
        raise CdclakeError(f"only root makes the copies under {ROOT} for another user's "
                           "processes")
    dest = ROOT / f"{prefix}-{digest}"
    try:
        with contextlib.suppress(FileExistsError):
            ROOT.mkdir()
            ROOT.chmod(0o755)  # whatever the umask: the server's user must enter it
        _require_safe(ROOT, tree=False)
        if not dest.is_dir():
            _make(dest, fill)
    except OSError as exc:
        raise CdclakeError(f"cannot make {dest}: {exc.strerror or exc}") from exc
    _require_safe(dest, tree=True)
    return dest


def _make(dest: Path, fill: Callable[[Path], None]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        fill(tmp / "copy")
        for d, _dirs, files in os.walk(tmp / "copy"):
            os.chmod(d, 0o755)
            for f in files:
                path = os.path.join(d, f)
                if not os.path.islink(path):
                    mode = os.stat(path).st_mode
                    os.chmod(path, 0o755 if mode & 0o100 else 0o644)
        os.rename(tmp / "copy", dest)
    except OSError:
        if not dest.is_dir():  # else another process made it first
            raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)


def _require_safe(path: Path, *, tree: bool) -> None:
    problem = unsafe(path, {0}, tree=tree)
    if problem is not None:
        raise CdclakeError(f"{path} is not safe to run another user's processes from: "
                           f"{problem} could be changed by a user other than root; fix or "
                           "remove it and run again")
