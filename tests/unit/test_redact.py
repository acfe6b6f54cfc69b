"""No password in a message, a log line or a report: DSNs are redacted wherever they appear."""

from __future__ import annotations

import pytest

from cdclake.cli import main
from cdclake.errors import redact


@pytest.mark.parametrize(("text", "expected"), [
    ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
    ("connect (postgres://u:p%40ss@h/db): refused", "connect (postgres://u:***@h/db): refused"),
    ("host=db user=app password=s3cret dbname=x", "host=db user=app password=*** dbname=x"),
    ("host=db password = 'a b\\' c' port=5", "host=db password = *** port=5"),
    ("PASSWORD=x", "PASSWORD=***"),
    ("postgresql://app@db/x and s3://bucket/wal", "postgresql://app@db/x and s3://bucket/wal"),
])
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_failed_connection_does_not_print_the_password(
        capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://app:s3cret@127.0.0.1:1/db?connect_timeout=2"
    assert main(["decode", "--wal", ".", "--start-lsn", "0/0", "--dsn", dsn]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to the source" in err and "127.0.0.1" in err
    assert "s3cret" not in err
