"""Fixtures for the Spark decode tests: the file's plain session (``spark``, tests/conftest.py)
decodes; the session's S3 endpoint (tests/e2e/conftest.py) and the archive tests' prefix per
test serve the one test over HTTP S3.
"""

from __future__ import annotations

from tests.e2e.archive.conftest import s3_config

__all__ = ["s3_config"]
