"""open_store: the backend follows the store URL's scheme; bad URLs are refused by name."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from cdclake.archive import open_store, store_for_url
from cdclake.archive.local import LocalStore
from cdclake.archive.s3 import S3Store
from cdclake.config import Config
from cdclake.errors import ConfigError


def test_s3_url_gives_bucket_prefix_and_endpoint_settings() -> None:
    cfg = Config(store_url="s3://lake/streams/main/", s3_endpoint_url="http://127.0.0.1:9000",
                 s3_region="eu-west-1", s3_access_key_id="id", s3_secret_access_key="secret")
    store = open_store(cfg)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url, store.region) == (
        "lake", "streams/main", "http://127.0.0.1:9000", "eu-west-1")
    assert (store.access_key_id, store.secret_access_key) == ("id", "secret")
    assert store.url("wal/x") == "s3://lake/streams/main/wal/x"


def test_s3_store_pickles_without_its_client() -> None:
    store = S3Store("lake", "p", endpoint_url="http://127.0.0.1:1")
    store._client()  # built lazily; must not travel to Spark executors
    copy = pickle.loads(pickle.dumps(store))
    assert copy._client_obj is None
    assert (copy.bucket, copy.prefix, copy.endpoint_url) == ("lake", "p", "http://127.0.0.1:1")


def test_stores_of_the_same_settings_share_one_client_per_process() -> None:
    """A run opens its store many times (lease, manifest, progress, each Spark task): one
    client for them all; other settings, or another process, get their own."""
    a = S3Store("lake", "p", endpoint_url="http://127.0.0.1:1", access_key_id="id",
                secret_access_key="secret")
    b = S3Store("lake", "other-prefix", endpoint_url="http://127.0.0.1:1", access_key_id="id",
                secret_access_key="secret")
    assert a._client() is b._client()
    other_key = S3Store("lake", "p", endpoint_url="http://127.0.0.1:1", access_key_id="id",
                        secret_access_key="another")
    fewer_attempts = S3Store("lake", "p", endpoint_url="http://127.0.0.1:1",
                             access_key_id="id", secret_access_key="secret", max_attempts=1)
    assert len({id(s._client()) for s in (a, other_key, fewer_attempts)}) == 3
    copy = pickle.loads(pickle.dumps(a))  # as a task unpickles it: the process's client
    assert copy._client() is a._client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked worker: never the parent's client and its pooled connections
        again = pickle.loads(pickle.dumps(a))
        os.write(write, b"parent's" if again._client() is a._client() else b"own")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"


def test_file_url_and_plain_path_give_a_directory(tmp_path: Path) -> None:
    store = store_for_url((tmp_path / "s t").as_uri(), Config())
    assert isinstance(store, LocalStore) and store.root == tmp_path / "s t"
    plain = store_for_url(str(tmp_path / "plain"), Config())
    assert isinstance(plain, LocalStore) and plain.root == tmp_path / "plain"


def test_default_store_is_under_home(tmp_path: Path) -> None:
    store = open_store(Config(home=tmp_path))
    assert isinstance(store, LocalStore) and store.root == tmp_path / "store"


@pytest.mark.parametrize(("url", "message"), [
    ("s3:///prefix", "has no bucket"),
    ("file://otherhost/x", "names host 'otherhost'"),
    ("gs://bucket/x", "unsupported store URL 'gs://bucket/x'"),
    ("relative/store", "store URL 'relative/store' is a relative path"),
    ("file:store", "store URL 'file:store' is a relative path"),
])
def test_bad_urls_are_refused_by_name(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        store_for_url(url, Config())
