"""The Spark steps' submission (cdclake.pipeline.submit) and the application it submits
(cdclake.pipeline.sparkapp), up to where spark-submit would start: no JVM, no Airflow."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from cdclake.archive import Layout, open_store
from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.pipeline import sparkapp, steps, submit


def test_the_properties_file_is_the_owners_and_keeps_every_value(tmp_path: Path) -> None:
    conf = {"spark.sql.catalog.c.uri": "jdbc:postgresql://h:5432/db?a=b",
            "spark.sql.catalog.c.jdbc.password": "p=w:d\\x", "spark.x": "two\nlines"}
    path = submit._properties(tmp_path / "spark.properties", conf)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert lines == ["spark.sql.catalog.c.uri=jdbc\\:postgresql\\://h\\:5432/db?a\\=b",
                     "spark.sql.catalog.c.jdbc.password=p\\=w\\:d\\\\x",
                     "spark.x=two\\nlines"]


@pytest.mark.parametrize(("step", "params", "error"), [
    ("validate_stream", {}, "'validate_stream' is not a Spark step"),
    ("decode", {"until_segment": "nope"}, "until_segment 'nope' is not a WAL segment name"),
    ("merge", {"tables": ["no_schema"]}, "give tables as schema.table"),
])
def test_a_bad_step_or_parameter_is_refused_before_anything_starts(
        step: str, params: dict[str, object], error: str, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    # the provider cannot even be imported: the refusal must come first
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    with pytest.raises(ConfigError, match=error):
        submit.submit(step, Config(), params)


def test_the_merge_on_pyiceberg_runs_here_and_on_spark_is_submitted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyiceberg's merge starts no Spark, so no application is submitted for it."""
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    config = Config(home=tmp_path)
    done = submit.submit("merge", config, {})
    assert done == steps.merge(config) and done["batches"] == []
    with pytest.raises(ImportError):  # the provider it would submit with
        submit.submit("merge", config.replace(merge_engine="spark"), {})


def test_a_snapshot_that_copies_nothing_runs_here(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    config = Config(home=tmp_path, snapshot_mode="never")
    assert submit.submit("snapshot", config, {}) == {
        "skipped": True, "tables": [], "reason": "snapshot_mode is never"}


def test_a_decode_with_nothing_new_runs_here(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduled run finds the archive as the last one left it: no application to start."""
    monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    config = Config(home=tmp_path)
    done = submit.submit("decode", config, {})
    assert done == steps.decode(config) and done["batch"] is None and not done["dry_run"]
    assert submit.submit("decode", config, {"dry_run": True})["dry_run"] is True


def test_the_application_runs_every_spark_step() -> None:
    assert tuple(sparkapp.RUNS) == submit.SPARK_STEPS


def test_the_application_writes_its_error_where_it_was_told(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path))
    key = Layout().submitted_key("t1")
    code = sparkapp.main(["decode", "--params", json.dumps({"end_lsn": "not an lsn"}),
                          "--result", key])
    assert code == 2
    answer = json.loads(open_store(Config.load()).get(key))
    assert set(answer) == {"error", "type"} and "end_lsn" in answer["error"]
    assert answer["type"] == "ConfigError"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"cdclake decode: error: {answer['error']}"]


def test_the_application_answers_a_bug_in_one_line_and_prints_its_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    """A step that fails in a way nobody foresaw still answers (the task would otherwise say
    only that the application ended without a result); its traceback goes to stderr, which
    is the Airflow task's log."""
    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path))

    def decode(config: Config, params: object) -> dict[str, object]:
        raise KeyError("missing")

    monkeypatch.setitem(sparkapp.RUNS, "decode", decode)
    key = Layout().submitted_key("t2")
    assert sparkapp.main(["decode", "--result", key]) == 1  # as the CLI answers a bug
    answer = json.loads(open_store(Config.load()).get(key))
    assert answer == {"error": "internal error: KeyError: 'missing'"}
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.splitlines()[-1] == ("cdclake decode: internal error: KeyError: 'missing' (a "
                                    "bug: its traceback is above)")

