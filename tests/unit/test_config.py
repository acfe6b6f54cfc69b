"""Reading the configuration: Spark settings and batch bounds from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

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
