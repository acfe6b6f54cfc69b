"""The object store on any S3 endpoint (AWS, MinIO, a local moto_server), over boto3.

Failures must surface fast — ``wal-push`` runs inside PostgreSQL's archiver, which retries on
its own — so the client uses botocore's *standard* retry mode with few attempts and short
connect timeouts. Botocore retries 500/503 (throttling included, with backoff) and dropped
connections up to the moment a response's headers arrive; the body of a GetObject is read
later, outside its retry loop, so :meth:`S3Store.get` re-issues a GET whose body breaks off.
Conditional writes use ``If-None-Match: *`` (S3 since 2024, MinIO, moto), and everything that
must happen once rests on them: wal-push's conflict check, the manifest's first writer, lease
generations, the progress log. An S3-compatible endpoint may ignore the header and replace
the object (a second primary's segment then overwrites ours, exit 0), or not support it
(501), so a store proves it first, once per store object (:meth:`S3Store.put`), and refuses
an endpoint that does not honour it, naming it.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions as bex
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config as BotoConfig

from cdclake.archive.layout import IF_NONE_MATCH_PROBE_KEY
from cdclake.archive.store import (
    SHA256_METADATA,
    ObjectInfo,
    ObjectStore,
    check_key,
    check_url_key,
    sha256_hex,
)
from cdclake.errors import (
    CdclakeError,
    ConfigError,
    ObjectNotFound,
    StoreError,
    StoreUnreachableError,
)

#: HTTP statuses / error codes that mean "no such object" on head and get.
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
#: what an endpoint without conditional-write support answers to If-None-Match on PUT.
_NO_CONDITIONAL = {"NotImplemented", "501"}
#: a GetObject body that broke off (or stalled) after its headers arrived
_BODY_BROKEN = (bex.ResponseStreamingError, bex.IncompleteReadError, bex.ReadTimeoutError)
#: what the If-None-Match probe writes (the same bytes each time: an endpoint that ignores
#: the header replaces the object with itself)
_PROBE = b"cdclake: this store must refuse to replace this object on If-None-Match: *\n"


@functools.lru_cache(maxsize=8)
def _s3_client(pid: int, endpoint_url: str | None, region: str, access_key_id: str | None,
               secret_access_key: str | None, max_attempts: int, connect_timeout: float,
               read_timeout: float) -> Any:
    """The boto3 client of these settings in this process (``pid``: never one a parent made
    before it forked, whose pooled connections it would share). A client is thread-safe and
    costs 50-100 ms of CPU to build (botocore reads its service model from JSON), and one run
    opens its store many times (the lease, the manifest, the progress, each Spark task): they
    share it."""
    session = boto3.session.Session(aws_access_key_id=access_key_id,
                                    aws_secret_access_key=secret_access_key, region_name=region)
    # total_max_attempts counts the first request; botocore's "max_attempts" would count only
    # the retries (3 meant 4 requests)
    cfg = BotoConfig(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    return session.client("s3", endpoint_url=endpoint_url, config=cfg)


class S3Store(ObjectStore):
    """Objects under ``s3://bucket/prefix``.

    The boto3 client is made on first use and dropped when pickled, so a store can be shipped
    to Spark executors and rebuilt there from its settings.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str = "us-east-1", access_key_id: str | None = None,
                 secret_access_key: str | None = None, max_attempts: int = 3,
                 connect_timeout: float = 3.0, read_timeout: float = 30.0) -> None:
        if not bucket:
            raise StoreError("an S3 store needs a bucket: use s3://BUCKET/PREFIX")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.region = region
        self.access_key_id = access_key_id or None
        self.secret_access_key = secret_access_key or None
        #: whether this endpoint was seen to honour If-None-Match (kept when pickled)
        self.conditional_put_checked = False
        self.max_attempts = max_attempts
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._client_obj: Any = None

    def __repr__(self) -> str:
        return f"S3Store({self.url()!r}, endpoint={self.endpoint_name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client_obj"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def endpoint_name(self) -> str:
        return self.endpoint_url or f"AWS S3 ({self.region})"

    def _client(self) -> Any:
        if self._client_obj is None:
            self._client_obj = _s3_client(os.getpid(), self.endpoint_url, self.region,
                                          self.access_key_id, self.secret_access_key,
                                          self.max_attempts, self.connect_timeout,
                                          self.read_timeout)
        return self._client_obj

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str = "") -> str:
        if key:
            check_url_key(key)
            full = f"{self.prefix}/{key}" if self.prefix else key
        else:
            full = self.prefix
        return f"s3://{self.bucket}/{full}" if full else f"s3://{self.bucket}"

    # -- operations ----------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        attempt = 1
        while True:
            try:
                body = self._client().get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            except (bex.ClientError, bex.BotoCoreError) as exc:
                raise self._read_error(exc, key) from exc
            try:
                return bytes(body.read())
            except bex.BotoCoreError as exc:
                # botocore's retries end when the headers arrive; the streamed body is read
                # here, outside them, so a body that broke off is fetched again (as
                # s3transfer's downloads do), within the same attempt budget
                if not isinstance(exc, _BODY_BROKEN) or attempt >= self.max_attempts:
                    raise self._error(exc, "reading", key, attempts=attempt) from exc
                attempt += 1

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self._client().head_object(Bucket=self.bucket, Key=self._key(key))
        except bex.ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return None
            raise self._error(exc, "inspecting", key) from exc
        except bex.BotoCoreError as exc:
            raise self._error(exc, "inspecting", key) from exc
        meta = {k.lower(): v for k, v in (resp.get("Metadata") or {}).items()}
        return ObjectInfo(key, int(resp["ContentLength"]), _etag(resp.get("ETag")),
                          meta.get(SHA256_METADATA))

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        """See :meth:`ObjectStore.put`.

        If-absent is one PUT with ``If-None-Match: *``, once :meth:`_check_conditional_put`
        has seen this endpoint honour the header. There is no fallback for an endpoint that
        does not (head, put, head again, as this store once did on a 501): two writers racing
        inside that window both believe they wrote, which is the very case lease generations
        and the progress log exist for; such a store is refused instead.
        """
        digest = sha256_hex(data)
        if if_absent:
            self._check_conditional_put()
            return self._create(key, data, digest)
        try:
            self._put(key, data, digest, if_none_match=False)
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._error(exc, "writing", key) from exc
        return True

    def _check_conditional_put(self) -> None:
        """Prove, once per store object, that the endpoint will not replace an object on a
        create-if-absent: create :data:`IF_NONE_MATCH_PROBE_KEY` if absent, and if that
        created it, once more. An endpoint that honours the header answers 412 to one of the
        two (usually the first: the probe stays, so a wal-push pays one request); one that
        ignores it creates it twice (with the same bytes: nothing of value is replaced) and is
        refused. A lost answer retried by botocore meets a 412 too, which proves it as well."""
        if self.conditional_put_checked:
            return
        digest = sha256_hex(_PROBE)
        if (self._create(IF_NONE_MATCH_PROBE_KEY, _PROBE, digest)
                and self._create(IF_NONE_MATCH_PROBE_KEY, _PROBE, digest)):
            raise self._unconditional(f"ignores If-None-Match: it created "
                                      f"{self.url(IF_NONE_MATCH_PROBE_KEY)} twice if absent")
        self.conditional_put_checked = True

    def _create(self, key: str, data: bytes, digest: str) -> bool:
        """One PUT with ``If-None-Match: *``: True if it created ``key``, False if the
        endpoint answered 412 (an object is there)."""
        try:
            self._put(key, data, digest, if_none_match=True)
        except bex.ClientError as exc:
            code = _code(exc)
            if code in ("PreconditionFailed", "412"):
                return False
            if code in ("ConditionalRequestConflict", "409"):
                raise StoreError(
                    f"another writer is writing {self.url(key)} right now; retry") from exc
            if code in _NO_CONDITIONAL:
                raise self._unconditional("does not support If-None-Match (501 Not "
                                          "Implemented)") from exc
            raise self._error(exc, "writing", key) from exc
        except bex.BotoCoreError as exc:
            raise self._error(exc, "writing", key) from exc
        return True

    def _unconditional(self, what: str) -> ConfigError:
        return ConfigError(
            f"S3 endpoint {self.endpoint_name} (bucket {self.bucket}) {what}; cdclake needs "
            "conditional writes (wal-push's conflict check, the manifest, leases and progress "
            "rest on create-if-absent): use an endpoint that honours them (AWS S3, MinIO)")

    def put_file(self, key: str, path: Path) -> None:
        """Streamed (multipart past s3transfer's threshold), with the sha256 metadata
        :meth:`put` writes."""
        try:
            with open(path, "rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            self._client().upload_file(str(path), self.bucket, self._key(key),
                                       ExtraArgs={"Metadata": {SHA256_METADATA: digest}})
        except OSError as exc:
            raise StoreError(f"cannot read {path} to write {self.url(key)}: "
                             f"{exc.strerror or exc}") from exc
        except (bex.ClientError, bex.BotoCoreError, S3UploadFailedError) as exc:
            raise self._error(exc, "writing", key) from exc

    def get_file(self, key: str, path: Path) -> None:
        """Streamed into a new 0600 file (s3transfer's own download would make it 0644)."""
        try:
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                           "wb") as out:
                self._client().download_fileobj(self.bucket, self._key(key), out)
        except (bex.ClientError, bex.BotoCoreError) as exc:
            raise self._read_error(exc, key) from exc
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def _put(self, key: str, data: bytes, digest: str, *, if_none_match: bool) -> None:
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_none_match else {}
        self._client().put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                  Metadata={SHA256_METADATA: digest}, **extra)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        root = f"{self.prefix}/" if self.prefix else ""
        try:
            pages = self._client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=root + prefix)
            for page in pages:
                for obj in page.get("Contents", ()):
                    yield ObjectInfo(obj["Key"][len(root):], int(obj["Size"]),
                                     _etag(obj.get("ETag")))
        except bex.ClientError as exc:
            raise self._error(exc, "listing", prefix) from exc
        except bex.BotoCoreError as exc:
            raise self._error(exc, "listing", prefix) from exc

    def delete(self, key: str) -> None:
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self._key(key))
        except bex.ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                return
            raise self._error(exc, "deleting", key) from exc
        except bex.BotoCoreError as exc:
            raise self._error(exc, "deleting", key) from exc

    # -- errors --------------------------------------------------------------------------

    def _read_error(self, exc: Exception, key: str) -> CdclakeError:
        """What a failed read of ``key`` raises: ObjectNotFound for a missing object."""
        if isinstance(exc, bex.ClientError) and _code(exc) in _NOT_FOUND:
            return ObjectNotFound(f"no object {key!r} in {self.url()}")
        return self._error(exc, "reading", key)

    def _error(self, exc: Exception, action: str, key: str,
               attempts: int | None = None) -> CdclakeError:
        """One place that turns botocore's exceptions into ours, naming endpoint and object,
        on one line (a server's message may carry newlines: it ends up in a log line)."""
        error = self._error_of(exc, action, key, attempts)
        return type(error)(" ".join(str(error).split()))

    def _error_of(self, exc: Exception, action: str, key: str,
                  attempts: int | None) -> CdclakeError:
        what = f"{action} {self.url(key) if key else self.url()}"
        if attempts is None:  # standard mode retries every 5xx and connection error
            meta = getattr(exc, "response", None) or {}
            retried = meta.get("ResponseMetadata", {}).get("RetryAttempts")
            attempts = retried + 1 if retried is not None else self.max_attempts
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, bex.ConnectionError):
            return StoreUnreachableError(
                f"S3 endpoint {self.endpoint_name} is unreachable ({what}, {tries}): "
                f"{str(exc).rstrip('.')}. Check CDCLAKE_S3_ENDPOINT_URL and that the service "
                "is running; nothing was changed")
        if isinstance(exc, bex.HTTPClientError):
            return StoreUnreachableError(
                f"S3 endpoint {self.endpoint_name} dropped the connection ({what}, {tries}): "
                f"{str(exc).rstrip('.')}; retry when the endpoint is healthy")
        if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
            return StoreError(
                f"no usable S3 credentials for {self.endpoint_name} ({what}): set "
                "CDCLAKE_S3_ACCESS_KEY_ID and CDCLAKE_S3_SECRET_ACCESS_KEY or configure boto3")
        if isinstance(exc, bex.ClientError):
            code = _code(exc)
            msg = exc.response.get("Error", {}).get("Message", "")
            if code == "NoSuchBucket":
                return StoreError(f"bucket {self.bucket!r} does not exist at "
                                  f"{self.endpoint_name} ({what}); create it first")
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return StoreError(f"access denied by {self.endpoint_name} ({what}): {code} "
                                  f"{msg}; check the S3 credentials and bucket policy")
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
                what = f"{what}, {tries}"
            return StoreError(f"S3 {code or 'error'} from {self.endpoint_name} ({what}): {msg}")
        return StoreError(f"S3 request to {self.endpoint_name} failed ({what}): {exc}")


def _code(exc: bex.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")
               or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _etag(value: str | None) -> str | None:
    return value.strip('"') if value else None
