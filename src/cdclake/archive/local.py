"""An object store in a local directory: the default for ``make demo`` and for unit tests.

Objects are this user's alone: files are created 0600 in directories created 0700.

Atomicity comes from the file system, not from locking: every put writes a hidden temp file
in the target directory and fsyncs it, then either ``rename``\\ s it over the key (replace) or
``link``\\ s it to the key (if-absent: ``link`` fails with EEXIST when the key exists, so two
writers racing for the same key cannot both win, and nobody ever sees a half-written object).
The directory entries are synced too: the key's, and each new directory's in its parent.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from cdclake.archive.store import ObjectInfo, ObjectStore, check_key, check_url_key
from cdclake.errors import ObjectNotFound, StoreError

#: Temp files start with this; ``check_key`` refuses it, ``list`` hides it.
TMP_PREFIX = ".cdclake-tmp-"


class LocalStore(ObjectStore):
    """Objects as files under ``root`` (keys are relative paths with ``/``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def url(self, key: str = "") -> str:
        if not key:
            return self.root.as_uri()
        uri = (self.root / check_url_key(key)).as_uri()
        return uri + "/" if key.endswith("/") else uri

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFound(f"no object {key!r} in {self.url()}") from exc
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        return self._write(key, lambda f: f.write(data), if_absent)

    def put_file(self, key: str, path: Path) -> None:
        try:
            with open(path, "rb") as src:
                self._write(key, lambda f: shutil.copyfileobj(src, f, 1 << 20), False)
        except FileNotFoundError as exc:
            raise StoreError(f"cannot write {key!r} to {self.url()}: no file {path}") from exc

    def get_file(self, key: str, path: Path) -> None:
        source = self._path(key)
        try:
            src = open(source, "rb")  # noqa: SIM115 - closed below, after the copy
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectNotFound(f"no object {key!r} in {self.url()}") from exc
        except OSError as exc:
            raise StoreError(f"cannot read {source}: {exc.strerror or exc}") from exc
        with src:
            try:
                with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                               "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            except OSError as exc:
                raise StoreError(f"cannot copy {source} to {path}: "
                                 f"{exc.strerror or exc}") from exc

    def _write(self, key: str, write: Callable[[BinaryIO], object], if_absent: bool) -> bool:
        """Write a new object through ``write`` into a private temporary file, then move it
        into place (or link it, if absent): never a partial object under the key."""
        path = self._path(key)
        tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{secrets.token_hex(6)}")
        try:
            self._mkdirs(path.parent)
            if path.is_dir():
                raise StoreError(f"cannot write {key!r} in {self.url()}: {path} is a directory")
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            if if_absent:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, path)
            _fsync_dir(path.parent)
            return True
        except OSError as exc:
            raise StoreError(
                f"cannot write {key!r} to {self.url()}: {exc.strerror or exc}"
                + (" (is the directory writable by this user?)"
                   if exc.errno in (errno.EACCES, errno.EPERM) else "")
            ) from exc
        finally:
            with contextlib.suppress(OSError):  # the original error, if any, matters more
                tmp.unlink(missing_ok=True)

    def _mkdirs(self, directory: Path) -> None:
        """Create ``directory`` and its missing parents 0700: objects are WAL, rows and state,
        for this user only (files are created 0600). Each new directory's entry is made
        durable in its parent (fsync), as a renamed file's is: an object whose directory a
        crash forgets is lost however well its own bytes were synced."""
        missing = []
        while not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for d in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another writer's: synced here too,
                d.mkdir(mode=0o700)                     # it may not have done so yet
            _fsync_dir(d.parent)

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                digest = hashlib.file_digest(f, "sha256").hexdigest()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
        return ObjectInfo(key, st.st_size, f"{st.st_mtime_ns:x}-{st.st_size:x}", digest)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        # Walk only the directory the prefix names; the rest of the prefix filters names.
        base = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        found: list[ObjectInfo] = []
        try:
            for dirpath, dirnames, filenames in os.walk(base, onerror=_raise_unless_missing):
                dirnames[:] = [d for d in dirnames if not d.startswith(TMP_PREFIX)]
                rel_dir = Path(dirpath).relative_to(self.root).as_posix()
                for name in filenames:
                    if name.startswith(TMP_PREFIX):
                        continue
                    key = name if rel_dir == "." else f"{rel_dir}/{name}"
                    if not key.startswith(prefix):
                        continue
                    try:
                        size = os.stat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:  # deleted while we walked
                        continue
                    found.append(ObjectInfo(key, size))
        except OSError as exc:
            raise StoreError(f"cannot list {base}: {exc.strerror or exc}") from exc
        found.sort(key=lambda o: o.key)
        yield from found

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot delete {path}: {exc.strerror or exc}") from exc


def _raise_unless_missing(exc: OSError) -> None:
    """os.walk hides errors by default; a missing directory is an empty listing, the rest fail."""
    if not isinstance(exc, FileNotFoundError):
        raise exc


def _fsync_dir(path: Path) -> None:
    """Make the new directory entry durable (a rename is not, until its directory is)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
