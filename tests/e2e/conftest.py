"""The e2e tests' one S3 endpoint: a real moto_server over HTTP, in its own process, started
once per session (per xdist worker) and shared by every e2e package; each user takes a prefix
of its own in the bucket, so tests do not see each other's objects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cdclake.local.s3 import LocalS3


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    """One moto_server for the session, with the ``cdclake`` bucket."""
    with LocalS3.start() as server:
        yield server
