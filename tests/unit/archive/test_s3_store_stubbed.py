"""S3Store logic that a healthy endpoint never shows: no conditional writes, error mapping.

botocore's Stubber answers in place of an endpoint; the real-HTTP behaviour is tested against
moto_server in tests/e2e/archive.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from cdclake.archive.s3 import S3Store
from cdclake.archive.store import sha256_hex
from cdclake.errors import ObjectNotFound, StoreError


@pytest.fixture
def store() -> S3Store:
    return S3Store("lake", "stream", endpoint_url="http://s3.invalid:9000",
                   access_key_id="k", secret_access_key="s")


def put_params(key: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"Bucket": "lake", "Key": key, "Body": ANY,
            "Metadata": {"sha256": sha256_hex(data)}, **extra}


def test_endpoint_without_if_none_match_falls_back_and_remembers(store: S3Store) -> None:
    data = b"segment"
    with Stubber(store._client()) as stub:
        stub.add_client_error("put_object", "NotImplemented", http_status_code=501,
                              expected_params=put_params("stream/wal/a", data, IfNoneMatch="*"))
        stub.add_client_error("head_object", "404", http_status_code=404,
                              expected_params={"Bucket": "lake", "Key": "stream/wal/a"})
        stub.add_response("put_object", {}, put_params("stream/wal/a", data))
        stub.add_response("head_object", {"ContentLength": 7, "ETag": '"e"',
                                          "Metadata": {"sha256": sha256_hex(data)}},
                          {"Bucket": "lake", "Key": "stream/wal/a"})
        assert store.put("wal/a", data, if_absent=True) is True
        assert store.conditional_put is False
        # learnt: the next if-absent put goes straight to head (object exists -> False)
        stub.add_response("head_object", {"ContentLength": 7, "ETag": '"e"', "Metadata": {}},
                          {"Bucket": "lake", "Key": "stream/wal/b"})
        assert store.put("wal/b", data, if_absent=True) is False
        stub.assert_no_pending_responses()


def test_fallback_detects_a_writer_that_won_the_race(store: S3Store) -> None:
    store.conditional_put = False
    with Stubber(store._client()) as stub:
        stub.add_client_error("head_object", "404", http_status_code=404)
        stub.add_response("put_object", {})
        stub.add_response("head_object", {"ContentLength": 5,
                                          "Metadata": {"sha256": sha256_hex(b"other")}})
        assert store.put("wal/a", b"mine!", if_absent=True) is False


def test_precondition_failed_means_already_there(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
        assert store.put("wal/a", b"x", if_absent=True) is False
        assert store.conditional_put is True  # the endpoint evaluated the condition


def test_concurrent_conditional_write_is_a_retryable_store_error(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        stub.add_client_error("put_object", "ConditionalRequestConflict", http_status_code=409)
        with pytest.raises(StoreError, match="another writer is writing"):
            store.put("wal/a", b"x", if_absent=True)


@pytest.mark.parametrize(("code", "status", "message"), [
    ("NoSuchBucket", 404, "bucket 'lake' does not exist at http://s3.invalid:9000"),
    ("AccessDenied", 403, "access denied by http://s3.invalid:9000"),
    ("InternalError", 500, "S3 InternalError from http://s3.invalid:9000"),
])
def test_errors_name_endpoint_and_object(store: S3Store, code: str, status: int,
                                         message: str) -> None:
    with Stubber(store._client()) as stub:
        stub.add_client_error("get_object", code, http_status_code=status)
        with pytest.raises(StoreError, match=message) as exc:
            store.get("wal/x")
    assert "s3://lake/stream/wal/x" in str(exc.value)


def test_missing_object(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404)
        with pytest.raises(ObjectNotFound, match="'wal/x' in s3://lake/stream"):
            store.get("wal/x")
        stub.add_client_error("head_object", "404", http_status_code=404)
        assert store.head("wal/x") is None
