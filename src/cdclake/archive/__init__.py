"""The archive: object store, key layout, wal-push, ship, manifest, gap and timeline checks.

:func:`open_store` picks the backend from the store URL's scheme and imports it only then, so
``cdclake wal-push`` on a local directory never imports boto3.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectInfo, ObjectStore
from cdclake.config import Config
from cdclake.errors import ConfigError

__all__ = ["Layout", "ObjectInfo", "ObjectStore", "open_store", "store_for_url"]


def open_store(config: Config) -> ObjectStore:
    """The store named by ``config.effective_store_url()``, with the S3 settings of ``config``."""
    return store_for_url(config.effective_store_url(), config)


def require_store(config: Config, command: str) -> None:
    """Refuse to archive without an explicitly configured store: the default one lies under
    ``CDCLAKE_HOME``, which for ``archive_command`` is inside the data directory, so
    PostgreSQL would recycle WAL that is archived nowhere else."""
    if not config.store_url:
        raise ConfigError(f"{command} needs a store: set CDCLAKE_STORE_URL (or store_url in the "
                          "configuration file) to an s3:// or file:// URL outside the data "
                          "directory")


def store_for_url(url: str, config: Config) -> ObjectStore:
    """``s3://bucket/prefix``, ``file:///dir`` or a plain directory path -> a store.

    Raises ConfigError naming the URL when it has another scheme, lacks a bucket or is a
    relative path.
    """
    parts = urlsplit(url)
    if parts.scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise ConfigError(f"store URL {url!r} has no bucket: use s3://BUCKET/PREFIX")
        from cdclake.archive.s3 import S3Store

        return S3Store(parts.netloc, unquote(parts.path), endpoint_url=config.s3_endpoint_url,
                       region=config.s3_region, access_key_id=config.s3_access_key_id,
                       secret_access_key=config.s3_secret_access_key)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"store URL {url!r} names host {parts.netloc!r}: file URLs must "
                              "be local (file:///absolute/path)")
        return _local(url, Path(unquote(parts.path)))
    if parts.scheme == "" and url:
        path = Path(url).expanduser()
        return _local(url, path.resolve() if path.is_absolute() else path)
    raise ConfigError(f"unsupported store URL {url!r}: use s3://BUCKET/PREFIX or "
                      "file:///absolute/path (CDCLAKE_STORE_URL)")


def _local(url: str, path: Path) -> ObjectStore:
    """A store in directory ``path``, which must be absolute: a relative one would be another
    directory for every command, depending on where it runs — for ``archive_command``, the
    data directory, whose WAL PostgreSQL then recycles as archived."""
    if not path.is_absolute():
        raise ConfigError(f"store URL {url!r} is a relative path, which each command would "
                          "resolve against the directory it runs in (archive_command: the data "
                          "directory): give an absolute path or file:///absolute/path")
    from cdclake.archive.local import LocalStore

    return LocalStore(path)
