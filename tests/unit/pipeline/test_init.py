"""``cdclake init`` without a server: the file it writes is the configuration the commands
then load, private to its owner; the ``archive_command`` it prints is the one
``wal_push_command`` builds, quoted for ``ALTER SYSTEM``; S3 keys stay out of it; what it
cannot do is one line and exit 2, with nothing written. (tests/e2e/pipeline/test_init.py
follows the printed steps on a real PostgreSQL.)"""

from __future__ import annotations

import getpass
import os
import re
import stat
from pathlib import Path

import pytest

from cdclake.archive.command import wal_push_command
from cdclake.cli import main
from cdclake.config import Config

ME = getpass.getuser()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("CDCLAKE_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def init(*args: str) -> int:
    return main(["init", "--server-user", ME, *args])


def printed_command(out: str) -> str:
    """The archive_command of the printed ``ALTER SYSTEM`` line, as PostgreSQL reads it."""
    (literal,) = re.findall(r"^ +ALTER SYSTEM SET archive_command = '(.*)';$", out, re.M)
    return literal.replace("''", "'")


def test_the_file_is_the_configuration_the_commands_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "o'brien store"  # a quote in the command: doubled for ALTER SYSTEM
    assert init("--dsn", "host=db dbname=shop", "--store", str(store),
                "--s3-endpoint-url", "http://minio:9000", "--home", "h") == 0
    out = capsys.readouterr().out
    written = tmp_path / "h" / "cdclake.toml"
    assert f"wrote {written} (mode 0600)" in out
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    config = Config.load(written, env={})
    assert (config.home, config.source_dsn, config.store_url, config.s3_endpoint_url) == (
        tmp_path / "h", "host=db dbname=shop", str(store), "http://minio:9000")
    text = written.read_text()
    assert "s3_region" not in text  # a default is not written as a choice
    assert '# merge_engine = "pyiceberg"' in text  # the next settings, commented out
    assert printed_command(out) == wal_push_command(config)
    steps = re.findall(r"^(\d)\. ", out, re.M)
    assert steps == ["1", "2", "3", "4", "5", "6"]
    assert f"export CDCLAKE_CONFIG={written}" in out and "pg_switch_wal()" in out


def test_s3_keys_go_to_a_file_the_command_names_never_into_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CDCLAKE_S3_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("CDCLAKE_S3_SECRET_ACCESS_KEY", "very-secret-key")
    assert init("--dsn", "dbname=shop", "--store", "s3://bucket/wal", "--home", "h") == 0
    out = capsys.readouterr().out
    keys = tmp_path / "h" / "wal-push.toml"
    assert "very-secret-key" not in out
    assert printed_command(out).startswith(f"env CDCLAKE_CONFIG={keys} ")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    pushed = Config.load(keys, env={})
    assert (pushed.store_url, pushed.s3_secret_access_key) == ("s3://bucket/wal",
                                                               "very-secret-key")


@pytest.mark.parametrize(("args", "says"), [
    ((), "give the source database: --dsn"),
    (("--dsn", "dbname=shop", "--store", "relative/dir"), "is a relative path"),
    (("--dsn", "dbname=shop", "--store", "ftp://host/x"), "unsupported store URL"),
    (("--dsn", "dbname=shop", "--store", "/proc/1/no-store"), "is not writable by"),
])
def test_what_it_cannot_do_is_one_line_and_nothing_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
        says: str) -> None:
    assert init(*args, "--home", "h") == 2
    err = capsys.readouterr().err
    assert err.startswith("cdclake init: error: ") and err.count("\n") == 1, err
    assert says in err
    assert not (tmp_path / "h").exists()


def test_an_existing_file_is_replaced_only_when_told(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "store")
    assert init("--dsn", "dbname=one", "--store", store, "--home", "h") == 0
    assert init("--dsn", "dbname=two", "--store", store, "--home", "h") == 2
    assert "exists: --force replaces it" in capsys.readouterr().err
    assert Config.load(tmp_path / "h" / "cdclake.toml", env={}).source_dsn == "dbname=one"
    assert init("--dsn", "dbname=two", "--store", store, "--home", "h", "--force") == 0
    assert Config.load(tmp_path / "h" / "cdclake.toml", env={}).source_dsn == "dbname=two"
