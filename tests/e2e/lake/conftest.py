"""A real S3 endpoint (moto_server over HTTP) for the lake's e2e tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdclake.local.s3 import LocalS3


@pytest.fixture(scope="session")
def lake_s3() -> Iterator[LocalS3]:
    with LocalS3.start() as server:
        yield server
