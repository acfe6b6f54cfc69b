"""The object-store interface every cdclake component writes through.

One small interface, two backends (S3 over boto3 in :mod:`cdclake.archive.s3`, a local
directory in :mod:`cdclake.archive.local`), chosen from the store URL's scheme by
:func:`cdclake.archive.open_store` — the layering of pyiceberg's ``FileIO``. Callers never see
boto3 or paths: they see keys relative to the store's root (made by
:class:`cdclake.archive.layout.Layout`) and these errors:

- :class:`~cdclake.errors.ObjectNotFound`: the key does not exist (``get``); no retry helps.
- :class:`~cdclake.errors.StoreUnreachableError`: the store did not answer at all (network,
  DNS, refused connection); the message names the endpoint. Retrying later may help.
- :class:`~cdclake.errors.StoreError`: the store answered with a failure (permissions, missing
  bucket, a server error after the retries). Retrying may help.

Every ``put`` is atomic: a reader sees the old object, no object, or the complete new one,
never a prefix. ``put(..., if_absent=True)`` is the primitive that archive-push semantics
(pgBackRest: same content is success, different content is a conflict) are built on.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cdclake.errors import ObjectNotFound

#: S3 user-metadata name (``x-amz-meta-sha256``) under which we store the content's sha256.
SHA256_METADATA = "sha256"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the store knows about one object without reading it.

    ``sha256`` is the hex digest of the stored bytes when it is known cheaply: from the
    metadata we wrote (S3) or computed on ``head`` (local). ``list`` leaves it ``None``
    because S3 listings do not carry user metadata.
    """

    key: str
    size: int
    etag: str | None = None
    sha256: str | None = None


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def check_key(key: str) -> str:
    """Reject keys that could escape the store root or alias another key.

    Keys come from :class:`~cdclake.archive.layout.Layout`, so a bad key is a programming
    error (ValueError), not bad user input. The rules keep the local backend safe (no ``..``,
    no absolute paths) and make S3 and the directory agree on what a key is.
    """
    if not key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"invalid object key {key!r}: must be a relative path to a file")
    parts = key.split("/")
    for part in parts:
        if part in ("", ".", "..") or part.startswith(".cdclake-tmp-") or "\\" in part:
            raise ValueError(f"invalid object key {key!r}: bad path component {part!r}")
    if posixpath.normpath(key) != key:
        raise ValueError(f"invalid object key {key!r}: not in normal form")
    return key


def check_url_key(key: str) -> str:
    """Like check_key, but also allows a prefix ending in ``/`` (for :meth:`ObjectStore.url`)."""
    if key.endswith("/"):
        return check_key(key[:-1]) + "/"
    return check_key(key)


class ObjectStore(ABC):
    """Objects under one root (an S3 bucket + prefix, or a directory), addressed by key."""

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's whole content.

        Raises ObjectNotFound if there is no such key, StoreUnreachableError / StoreError if
        the store fails.
        """

    @abstractmethod
    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        """Store ``data`` under ``key`` atomically; return True if this call wrote it.

        With ``if_absent`` an existing object is left untouched and False is returned — the
        caller decides whether the existing content is the same (success) or a conflict.
        Without it an existing object is replaced (still atomically) and True is returned.
        Raises StoreUnreachableError / StoreError; after an error the key holds either the old
        object or none, never a partial one.
        """

    @abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size, etag and (when known) sha256 of the object, or None if it does not exist.

        Raises StoreUnreachableError / StoreError.
        """

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a string prefix, not a directory),
        sorted by key. Raises StoreUnreachableError / StoreError.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key is not an error.

        Raises StoreUnreachableError / StoreError.
        """

    @abstractmethod
    def url(self, key: str = "") -> str:
        """A URL naming the object (``s3://bucket/prefix/key``, ``file:///dir/key``), for
        messages and for tools that take URLs (pyiceberg, Spark). A key ending in ``/`` names
        a "directory" (``changes/<batch>/``) and keeps its slash; ``""`` is the root."""

    def put_file(self, key: str, path: Path) -> None:
        """Store the file at ``path`` under ``key`` (replacing it, atomically), streamed
        where the store can: the spill file of a large open transaction must not pass
        through memory whole. This default reads it whole."""
        self.put(key, Path(path).read_bytes())

    def get_file(self, key: str, path: Path) -> None:
        """Write the object to a new private (0600) file ``path``, streamed where the store
        can; raises like :meth:`get`. This default reads it whole."""
        data = self.get(key)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            f.write(data)

    def exists(self, key: str) -> bool:
        """Whether the key exists; raises like :meth:`head`."""
        return self.head(key) is not None

    def content_sha256(self, key: str) -> str | None:
        """sha256 of the stored bytes, reading the object only when no metadata says it.

        Returns None if the key does not exist. Raises like :meth:`get`.
        """
        info = self.head(key)
        if info is None:
            return None
        if info.sha256 is not None:
            return info.sha256
        try:
            return sha256_hex(self.get(key))
        except ObjectNotFound:
            return None
