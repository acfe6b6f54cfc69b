"""``cdclake sql`` without starting Spark: the query's rows printed, its failure one line, a
missing catalog said before Spark starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pyspark.errors import PySparkException

from cdclake import cli
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake import query


class FakeSession:
    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.shown, self.stopped = error, None, False

    def sql(self, query: str) -> FakeSession:
        if self.error:
            raise self.error
        return self

    def show(self, n: int, truncate: bool) -> None:
        self.shown = (n, truncate)

    def stop(self) -> None:
        self.stopped = True


def _run(monkeypatch: pytest.MonkeyPatch, session: FakeSession, *argv: str) -> int:
    monkeypatch.setattr(query, "open_catalog", lambda config, create: None)
    monkeypatch.setattr(query, "session", lambda config, app: session)
    p = argparse.ArgumentParser()
    query.add_sql_arguments(p)
    return query.run_sql(p.parse_args(list(argv)), Config())


def test_sql_shows_at_most_max_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    session = FakeSession()
    assert _run(monkeypatch, session, "--max-rows", "3", "SELECT 1") == 0
    assert session.shown == (3, False) and session.stopped


def test_sql_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    session = FakeSession(PySparkException(message="[X] bad query\n== SQL ==\nSELECT"))
    with pytest.raises(LakeError, match=r"^query failed: \[X\] bad query$"):
        _run(monkeypatch, session, "SELECT")
    assert session.stopped


def test_sql_without_a_catalog_fails_before_spark(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path))
    monkeypatch.setattr(query, "session", pytest.fail)
    assert cli.main(["sql", "SELECT 1"]) == 2
    assert capsys.readouterr().err == (f"cdclake sql: error: no Iceberg catalog at "
                                       f"{tmp_path / 'catalog.db'} yet: nothing was merged\n")


def test_sql_max_rows_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sql", "--max-rows", "0", "SELECT 1"])
    assert exit_.value.code == 2
    assert "--max-rows: must be at least 1" in capsys.readouterr().err
