"""A copy of what ``cdclake wal-push`` imports, for a server user who cannot read the checkout.

PostgreSQL runs ``archive_command`` as the cluster's owner. When cdclake lives in a directory
only its owner may enter (a clone in root's home, mode 0700), that user can run neither the
virtualenv's interpreter nor import its packages. The system interpreter of the same version
can run them, given readable copies: this module copies the packages ``wal-push`` loads
(cdclake itself, boto3 and botocore with their data, the compression codecs) into a directory
under ``/var/tmp`` anyone may read, named by a digest of the copied files, so an unchanged
set is copied once and a changed one gets a directory of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from cdclake.errors import CdclakeError

#: what wal-push runs: the CLI, the push, both stores and the codecs it may load lazily
MODULES = ("cdclake.cli", "cdclake.archive.push", "cdclake.archive.s3",
           "cdclake.archive.local", "zstandard")
ROOT = Path("/var/tmp")


def _loaded_tops(roots: list[Path]) -> dict[Path, Path]:
    """Top-level package directories (or single-file modules) under ``roots`` that a fresh
    interpreter loads for wal-push: path -> the root it is under. A fresh one, so that what
    this process imported for other reasons (a test run's modules) is not copied."""
    probe = ("import importlib, sys, boto3\n"
             f"for name in {MODULES!r}: importlib.import_module(name)\n"
             "boto3.session.Session(region_name='us-east-1').client('s3')\n"  # lazy parts
             "print('\\n'.join(getattr(m, '__file__', None) or '' "
             "for m in list(sys.modules.values())))")
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
        for root in innermost_first:
            if path.is_relative_to(root):
                tops[root / path.relative_to(root).parts[0]] = root
                break
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


def runtime_copy(paths: list[str]) -> Path:
    """A directory anyone may read holding the packages wal-push imports from ``paths``
    (this interpreter's site-packages and source directories), made if missing."""
    roots = [Path(p).resolve() for p in paths]
    tops = _loaded_tops(roots)

    def fill(tmp: Path) -> None:
        tmp.mkdir()
        for top in tops:
            if top.is_dir():
                shutil.copytree(top, tmp / top.name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(top, tmp / top.name)

    return shared_copy("cdclake-runtime", _digest(tops), fill)


def shared_copy(prefix: str, digest: str, fill: Callable[[Path], None]) -> Path:
    """``/var/tmp/<prefix>-<digest>``, filled by ``fill`` once and readable by anyone.

    The directory is made under a temporary name and renamed into place, so a reader never
    sees half a copy. One that is already there is used only if this user owns it and no one
    else may write to it: ``/var/tmp`` is shared, and another user's directory of that name
    could hold code the server would run."""
    dest = ROOT / f"{prefix}-{digest}"
    if not dest.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=ROOT))
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
            if not dest.is_dir():
                raise
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(tmp)
    st = dest.lstat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022 or not stat.S_ISDIR(st.st_mode):
        raise CdclakeError(f"{dest} is not this user's own copy (owner uid {st.st_uid}, mode "
                           f"{stat.S_IMODE(st.st_mode):o}); remove it and run again")
    return dest
