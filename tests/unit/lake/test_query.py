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


# -- --engine duckdb: a real catalog and warehouse, no Spark ----------------------------------


def _lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """Two mirrors of stream main, one table of another stream and one that is no mirror."""
    import pyarrow as pa

    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.tables import KIND, MIRROR
    from cdclake.lake.watermark import STREAM

    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path))
    config = Config.load()
    catalog = open_catalog(config)
    catalog.create_namespace("cdc")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "status": ["new", "paid", "paid"]})
    for name, stream, kind in (("public__orders", "main", MIRROR),
                               ("public__items", "main", MIRROR),
                               ("public__elsewhere", "other", MIRROR),
                               ("public__orders_log", "main", "changelog")):
        table = catalog.create_table(("cdc", name), schema=rows.schema,
                                     properties={STREAM: stream, KIND: kind})
        table.append(rows)
    return config


def test_duckdb_answers_over_this_streams_mirrors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _lake(tmp_path, monkeypatch)
    monkeypatch.setattr(query, "session", pytest.fail)
    assert cli.main(["sql", "--engine", "duckdb", "SELECT status, count(*) AS n FROM "
                     "cdc.public__orders GROUP BY status ORDER BY status"]) == 0
    out = capsys.readouterr().out
    assert [line.split("│")[1:3] for line in out.splitlines() if "│" in line][-2:] == [
        [" new     ", "     1 "], [" paid    ", "     2 "]], out
    assert cli.main(["sql", "--engine", "duckdb", "--max-rows", "1",
                     "SELECT * FROM cdc.public__items"]) == 0
    out = capsys.readouterr().out
    assert out.count("│     1 │") == 1 and "│     2 │" not in out, out
    assert out.rstrip().endswith("only showing the first 1 rows"), out
    # another stream's table and a changelog are no views here
    for name in ("public__elsewhere", "public__orders_log"):
        assert cli.main(["sql", "--engine", "duckdb", f"SELECT 1 FROM cdc.{name}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("cdclake sql: error: query failed: Catalog Error: ") \
            and err.count("\n") == 1 and name in err, err
