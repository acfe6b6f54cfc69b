"""S3Store logic a healthy endpoint never shows: conditional writes proven, error mapping.

botocore's Stubber answers in place of an endpoint; the real-HTTP behaviour is tested against
moto_server in tests/e2e/archive.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from cdclake.archive import s3
from cdclake.archive.s3 import S3Store
from cdclake.archive.store import sha256_hex
from cdclake.errors import ConfigError, ObjectNotFound, StoreError


@pytest.fixture
def store() -> S3Store:
    return S3Store("lake", "stream", endpoint_url="http://s3.invalid:9000",
                   access_key_id="k", secret_access_key="s")


def put_params(key: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"Bucket": "lake", "Key": key, "Body": ANY,
            "Metadata": {"sha256": sha256_hex(data)}, **extra}


PROBE = "stream/state/if-none-match-probe"


def probe_put(stub: Stubber, status: int | None) -> None:
    """The probe's create-if-absent, answered ``status`` (None: created)."""
    params = put_params(PROBE, s3._PROBE, IfNoneMatch="*")
    if status is None:
        stub.add_response("put_object", {}, params)
    else:
        code = {412: "PreconditionFailed", 501: "NotImplemented"}[status]
        stub.add_client_error("put_object", code, http_status_code=status,
                              expected_params=params)


def test_if_none_match_is_proven_once_before_the_first_conditional_write(
        store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        probe_put(stub, None)  # a new store: the probe is created...
        probe_put(stub, 412)  # ...and not created again
        stub.add_response("put_object", {}, put_params("stream/wal/a", b"a", IfNoneMatch="*"))
        stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412,
                              expected_params=put_params("stream/wal/b", b"b", IfNoneMatch="*"))
        assert store.put("wal/a", b"a", if_absent=True) is True
        assert store.put("wal/b", b"b", if_absent=True) is False
        stub.assert_no_pending_responses()
    assert store.conditional_put_checked


def test_a_probe_left_by_an_earlier_process_proves_it_in_one_request(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        probe_put(stub, 412)
        stub.add_response("put_object", {}, put_params("stream/wal/a", b"a", IfNoneMatch="*"))
        assert store.put("wal/a", b"a", if_absent=True) is True
        stub.assert_no_pending_responses()


def test_a_plain_put_needs_no_proof(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        stub.add_response("put_object", {}, put_params("stream/wal/a", b"a"))
        assert store.put("wal/a", b"a") is True
        stub.assert_no_pending_responses()
    assert not store.conditional_put_checked


@pytest.mark.parametrize(("answers", "what"), [
    ((None, None), "ignores If-None-Match: it created "
                   "s3://lake/stream/state/if-none-match-probe twice if absent"),
    ((501,), r"does not support If-None-Match \(501 Not Implemented\)"),
    ((None, 501), r"does not support If-None-Match \(501 Not Implemented\)"),
], ids=["ignored", "not-implemented", "not-implemented-second"])
def test_an_endpoint_that_does_not_honour_if_none_match_is_refused(
        store: S3Store, answers: tuple[int | None, ...], what: str) -> None:
    """Refused before the write it was asked for: no PUT of wal/a reaches the endpoint (the
    stubber would fail on one it did not expect)."""
    with Stubber(store._client()) as stub:
        for status in answers:
            probe_put(stub, status)
        with pytest.raises(ConfigError, match=(
                f"^S3 endpoint http://s3.invalid:9000 \\(bucket lake\\) {what}; cdclake needs "
                "conditional writes")):
            store.put("wal/a", b"a", if_absent=True)
        stub.assert_no_pending_responses()
    assert not store.conditional_put_checked


def test_precondition_failed_means_already_there(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        probe_put(stub, 412)
        stub.add_client_error("put_object", "PreconditionFailed", http_status_code=412)
        assert store.put("wal/a", b"x", if_absent=True) is False


def test_concurrent_conditional_write_is_a_retryable_store_error(store: S3Store) -> None:
    with Stubber(store._client()) as stub:
        probe_put(stub, 412)
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
