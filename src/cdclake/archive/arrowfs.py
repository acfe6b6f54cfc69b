"""The object store as a pyarrow filesystem, for the Parquet change stream.

The store itself goes through boto3 (:mod:`cdclake.archive.s3`); Parquet reads and writes go
through pyarrow, which needs its own S3 client. It is built from the same configuration, with
an explicit endpoint and keys, so a local endpoint (moto, MinIO) works without AWS variables.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from pyarrow import fs as pafs

from cdclake.config import Config
from cdclake.errors import ConfigError, StoreError


def arrow_filesystem(config: Config, url: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path on it for a store URL (``s3://`` or ``file://``)."""
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme == "file":
        return pafs.LocalFileSystem(), unquote(parts.path)
    if parts.scheme not in ("s3", "s3a"):
        raise ConfigError(f"the change stream cannot live at {url}: use an s3:// or file:// "
                          "store")
    kwargs: dict[str, Any] = {"region": config.s3_region}
    if config.s3_access_key_id:
        kwargs["access_key"] = config.s3_access_key_id
        kwargs["secret_key"] = config.s3_secret_access_key
    if config.s3_endpoint_url:
        endpoint = urlsplit(config.s3_endpoint_url)
        kwargs["endpoint_override"] = endpoint.netloc
        kwargs["scheme"] = endpoint.scheme or "https"
    try:
        filesystem = pafs.S3FileSystem(**kwargs)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for bad settings
        raise StoreError(f"cannot open S3 at {config.s3_endpoint_url or 'AWS'} for the "
                         f"change stream: {exc}") from exc
    return filesystem, f"{parts.netloc}{unquote(parts.path)}"
