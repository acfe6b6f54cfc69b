"""Reading the configuration: Spark settings and batch bounds from the environment."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from cdclake.cli import main
from cdclake.config import Config
from cdclake.errors import ConfigError


def test_spark_settings_and_batch_bounds_from_the_environment() -> None:
    config = Config.load(env={
        "CDCLAKE_SPARK_CONF": "spark.driver.memory=1g, spark.driver.maxResultSize=64m,",
        "CDCLAKE_MAX_BATCH_SEGMENTS": "8", "CDCLAKE_MAX_BATCH_BYTES": "64MB"})
    assert config.spark_conf == {"spark.driver.memory": "1g",
                                 "spark.driver.maxResultSize": "64m"}
    assert config.max_batch_segments == 8 and config.max_batch_bytes == 64 << 20
    defaults = Config.load(env={})
    assert defaults.spark_conf == {} and defaults.max_batch_segments >= 1
    assert defaults.merge_engine == "pyiceberg"
    assert Config.load(env={"CDCLAKE_MERGE_ENGINE": "spark"}).merge_engine == "spark"


@pytest.mark.parametrize(("key", "value", "message"), [
    ("CDCLAKE_SPARK_CONF", "spark.driver.memory", "'spark.driver.memory' is not key=value"),
    ("CDCLAKE_CATALOG_PROPERTIES", "type=rest,uri", "'uri' is not key=value"),
    ("CDCLAKE_MAX_BATCH_SEGMENTS", "0", "max_batch_segments must be at least 1"),
    ("CDCLAKE_MAX_BATCH_SEGMENTS", "many", "max_batch_segments must be an integer"),
    ("CDCLAKE_MAX_BATCH_BYTES", "lots", "not a size"),
    ("CDCLAKE_MERGE_ENGINE", "duckdb", "merge_engine must be one of pyiceberg, spark"),
])
def test_a_bad_value_names_the_setting(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.load(env={key: value})


def test_a_toml_table_of_spark_settings(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[cdclake.spark_conf]\n"spark.executor.memory" = "2g"\n')
    assert Config.load(path, env={}).spark_conf == {"spark.executor.memory": "2g"}


def test_tables_to_exclude_from_the_environment_or_a_file(tmp_path: Path) -> None:
    """CDCLAKE_EXCLUDE_TABLES takes ``schema.table`` names as CDCLAKE_TABLES does."""
    config = Config.load(env={"CDCLAKE_EXCLUDE_TABLES": " public.odd, other.big ,",
                              "CDCLAKE_TABLES": "public.a"})
    assert config.exclude_tables == ["public.odd", "other.big"] and config.tables == ["public.a"]
    path = tmp_path / "c.toml"
    path.write_text('[cdclake]\nexclude_tables = ["public.odd"]\n')
    assert Config.load(path, env={}).exclude_tables == ["public.odd"]
    assert Config.load(env={}).exclude_tables == []


# -- values of the wrong type in a TOML file: one ConfigError naming key, file and type ------


def load_toml(tmp_path: Path, body: str) -> Config:
    path = tmp_path / "cdclake.toml"
    path.write_text(body)
    return Config.load(path, env={})


@pytest.mark.parametrize(("body", "message"), [
    ("[cdclake]\nlease_ttl = [1]", "lease_ttl must be a number, got an array"),
    ("home = 5", "home must be a path (a non-empty string), got an integer"),
    ("store_url = 7", "store_url must be a string, got an integer"),
    ("tables = 5", "tables must be an array of strings, got an integer"),
    ('tables = ["public.a", 5]', "tables must be an array of strings, got an array holding "
                                 "an integer"),
    ('home = ""', "home must be a path (a non-empty string), got an empty string"),
    ("keep_hours = true", "keep_hours must be a number, got a boolean"),
    ("lease_wait = nan", "lease_wait must be a number of seconds, got nan"),
    ("[cdclake.spark_conf]\nx = [1]", "spark_conf must be a table of strings, got a table "
                                      "holding an array"),
    ("cdclake = 5", "cdclake must be a table ([cdclake]), got an integer"),
])
def test_the_wrong_types_users_wrote(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, body)
    assert str(err.value) == f"{message} (in configuration file {tmp_path / 'cdclake.toml'})"


#: TOML values no field takes: an array of tables, a boolean, a date
WRONG = ['[{a = 1}]', "true", "1979-05-27"]


@pytest.mark.parametrize("wrong", WRONG)
@pytest.mark.parametrize("name", [f.name for f in fields(Config)])
def test_every_setting_refuses_a_value_of_the_wrong_type(tmp_path: Path, name: str,
                                                         wrong: str) -> None:
    """One declaration (the field's type) checks every key: a ConfigError naming the key and
    the file, never a TypeError or a value taken as something else."""
    with pytest.raises(ConfigError, match=rf"^{name} must be .*, got an? \w+.* \(in "
                                          rf"configuration file .*cdclake\.toml\)$"):
        load_toml(tmp_path, f"[cdclake]\n{name} = {wrong}")


def test_scalars_in_a_settings_table_are_strings(tmp_path: Path) -> None:
    config = load_toml(tmp_path, '[cdclake.spark_conf]\n"spark.a" = true\n"spark.b" = 2\n'
                                 '[cdclake]\nlease_ttl = 30\ntables = ["public.a"]\n'
                                 'work_mem = "4MB"\n')
    assert config.spark_conf == {"spark.a": "true", "spark.b": "2"}
    assert (config.lease_ttl, config.tables, config.work_mem) == (30.0, ["public.a"], 4 << 20)


def test_a_wrong_type_is_one_line_and_exit_2_from_the_cli(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CDCLAKE_HOME", raising=False)
    path = tmp_path / "cdclake.toml"
    path.write_text("[cdclake]\nhome = 5\n")
    assert main(["--config", str(path), "status"]) == 2
    err = capsys.readouterr().err
    assert err == (f"cdclake status: error: home must be a path (a non-empty string), got an "
                   f"integer (in configuration file {path})\n")
