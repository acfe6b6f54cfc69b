"""Spark SQL's view of the mirrors' catalog, and the jar set, without starting Spark.

The Spark catalog must point at the very database and warehouse pyiceberg uses (the same
derivation from the Config); the relocated Jackson jar is built once per set of inputs, in
place atomically. One test runs Debian's jarjar for real on pyspark's smallest Jackson jar.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from cdclake import cli
from cdclake.config import Config
from cdclake.errors import ConfigError, LakeError
from cdclake.lake import sparksql
from cdclake.lake.catalog import catalog_properties
from cdclake.lake.sparksql import JarSet

JARS = JarSet(Path("/j/runtime.jar"), Path("/j/jackson.jar"), Path("/j/sqlite.jar"))


def _config(tmp_path: Path, **kw: Any) -> Config:
    return Config(home=tmp_path / "home", **kw)


# -- the catalog -------------------------------------------------------------------------------


def test_default_sqlite_catalog_is_pyicebergs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    conf = sparksql.catalog_conf(config)
    py = catalog_properties(config)
    assert py["uri"] == f"sqlite:///{tmp_path / 'home' / 'catalog.db'}"
    assert conf == {"type": "jdbc", "uri": f"jdbc:sqlite:{tmp_path / 'home' / 'catalog.db'}",
                    "warehouse": py["warehouse"], "jdbc.schema-version": "V1",
                    "jdbc.init-catalog-tables": "false",
                    "default-namespace": "cdc"}
    assert conf["warehouse"] == (tmp_path / "home" / "warehouse").as_uri()


def test_relative_sqlite_path_is_made_absolute(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, catalog_uri="sqlite:///rel/cat.db")
    assert sparksql.catalog_conf(config)["uri"] == f"jdbc:sqlite:{tmp_path / 'rel' / 'cat.db'}"


def test_postgresql_uri_moves_credentials_to_properties(tmp_path: Path) -> None:
    config = _config(tmp_path, catalog_uri="postgresql+psycopg://ice%40berg:p%3Ass%2Fw@db.example"
                                           ":5433/lake?sslmode=require",
                     warehouse="file:///data/wh", catalog_name="prod", namespace="mirrors")
    conf = sparksql.catalog_conf(config)
    assert conf["uri"] == "jdbc:postgresql://db.example:5433/lake?sslmode=require"
    assert conf["jdbc.user"] == "ice@berg" and conf["jdbc.password"] == "p:ss/w"
    assert conf["warehouse"] == "file:///data/wh" and conf["default-namespace"] == "mirrors"
    spark = sparksql.spark_conf(config, JarSet(JARS.runtime, JARS.jackson,
                                               Path("/j/postgresql.jar")))
    assert spark["spark.sql.catalog.prod"] == sparksql.SPARK_CATALOG
    assert spark["spark.sql.catalog.prod.jdbc.password"] == "p:ss/w"
    assert spark["spark.sql.defaultCatalog"] == "prod"


def test_postgresql_without_password_and_ipv6(tmp_path: Path) -> None:
    url, props = sparksql.jdbc_catalog(_config(tmp_path,
                                               catalog_uri="postgresql://u@[::1]/lake"))
    assert url == "jdbc:postgresql://[::1]/lake" and props == {"jdbc.user": "u"}


@pytest.mark.parametrize(("uri", "words"), [
    ("postgresql+psycopg:///lake?host=/run/postgresql", "no host"),
    ("mysql://u:p@h/db", "neither"),
    ("sqlite:///:memory:", "in-memory"),
])
def test_catalog_uris_spark_cannot_use(tmp_path: Path, uri: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        sparksql.catalog_conf(_config(tmp_path, catalog_uri=uri))


def test_s3_warehouse_gets_s3_file_io(tmp_path: Path) -> None:
    config = _config(tmp_path, warehouse="s3://bucket/wh", s3_endpoint_url="http://127.0.0.1:9000",
                     s3_region="eu-west-1", s3_access_key_id="AK", s3_secret_access_key="SK")
    conf = sparksql.catalog_conf(config)
    assert conf["io-impl"] == sparksql.S3_FILE_IO
    assert {k: conf[k] for k in ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key",
                                 "client.region", "s3.path-style-access")} == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK", "client.region": "eu-west-1",
        "s3.path-style-access": "true"}
    assert "s3.region" not in conf


def test_explicit_catalog_properties_pass_but_pyicebergs_own_do_not(tmp_path: Path) -> None:
    config = _config(tmp_path, catalog_properties={"type": "sql", "echo": "true",
                                                   "jdbc.verifyServerCertificate": "false"})
    conf = sparksql.catalog_conf(config)
    assert conf["jdbc.verifyServerCertificate"] == "false"
    assert "echo" not in conf and conf["type"] == "jdbc"


def test_spark_conf_has_class_path_and_extensions(tmp_path: Path) -> None:
    conf = sparksql.spark_conf(_config(tmp_path), JARS)
    assert conf["spark.driver.extraClassPath"] == "/j/runtime.jar:/j/jackson.jar:/j/sqlite.jar"
    assert conf["spark.executor.extraClassPath"] == conf["spark.driver.extraClassPath"]
    assert conf["spark.sql.extensions"] == sparksql.EXTENSIONS
    assert conf["spark.sql.catalog.cdclake"] == sparksql.SPARK_CATALOG
    assert conf["spark.sql.catalog.cdclake.type"] == "jdbc"


def test_other_catalog_types_are_the_users_to_configure(tmp_path: Path) -> None:
    rest = {"type": "rest"}
    with pytest.raises(ConfigError, match=r"spark\.sql\.catalog\.cdclake=.*spark_conf"):
        sparksql.spark_conf(_config(tmp_path, catalog_properties=rest), JARS)
    own = {"spark.sql.catalog.cdclake": sparksql.SPARK_CATALOG}
    conf = sparksql.spark_conf(_config(tmp_path, catalog_properties=rest, spark_conf=own), JARS)
    assert "spark.sql.catalog.cdclake" not in conf and "spark.sql.extensions" in conf


# -- the jars ----------------------------------------------------------------------------------


def _jar(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


class FakeJarjar:
    """Records its calls; 'relocates' by copying the merged jar."""

    def __init__(self) -> None:
        self.inputs: list[set[str]] = []

    def __call__(self, rules: Path, src: Path, dest: Path) -> None:
        assert rules.read_text().strip() == sparksql.JACKSON_RULE
        with zipfile.ZipFile(src) as z:
            self.inputs.append(set(z.namelist()))
        dest.write_bytes(src.read_bytes())


def test_relocated_jar_is_built_once_per_key(tmp_path: Path) -> None:
    sources = [_jar(tmp_path / "a.jar", {"META-INF/MANIFEST.MF": b"m", "com/x/A.class": b"a",
                                         "module-info.class": b"mi"}),
               _jar(tmp_path / "b.jar", {"META-INF/MANIFEST.MF": b"m", "com/x/B.class": b"b"})]
    cache = tmp_path / "cache"
    runner = FakeJarjar()
    first = sparksql.relocated_jackson(sources, "k1", cache, runner=runner)
    assert runner.inputs == [{"com/x/A.class", "com/x/B.class"}]
    assert sparksql.relocated_jackson(sources, "k1", cache, runner=runner) == first
    assert len(runner.inputs) == 1  # reused
    second = sparksql.relocated_jackson(sources, "k2", cache, runner=runner)
    assert second != first and len(runner.inputs) == 2
    assert sorted(p.name for p in cache.iterdir()) == [second.name]  # old key removed


def test_failed_build_leaves_nothing_under_the_final_name(tmp_path: Path) -> None:
    source = _jar(tmp_path / "a.jar", {"com/x/A.class": b"a"})

    def broken(rules: Path, src: Path, dest: Path) -> None:
        dest.write_bytes(b"partial")
        raise ConfigError("jarjar failed")

    with pytest.raises(ConfigError, match="jarjar failed"):
        sparksql.relocated_jackson([source], "k", tmp_path / "cache", runner=broken)
    assert list((tmp_path / "cache").iterdir()) == []


def test_cache_key_follows_the_inputs(tmp_path: Path) -> None:
    a = _jar(tmp_path / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar", {"x": b"1"})
    b = _jar(tmp_path / "jackson-core-2.15.2.jar", {"y": b"2"})
    c = _jar(tmp_path / "jackson-core-2.15.3.jar", {"y": b"2"})
    assert sparksql.cache_key(a, [b]) == sparksql.cache_key(a, [b])
    assert sparksql.cache_key(a, [b]) != sparksql.cache_key(a, [c])


def test_jarjar_relocates_pysparks_jackson(tmp_path: Path) -> None:
    """The real tool on the real input (the smallest of the three jars)."""
    annotations = [p for p in sparksql.jackson_sources() if "annotations" in p.name]
    out = sparksql.relocated_jackson(annotations, "real", tmp_path)
    names = zipfile.ZipFile(out).namelist()
    classes = [n for n in names if n.endswith(".class")]
    assert classes and all(
        n.startswith("org/apache/iceberg/shaded/com/fasterxml/jackson/") for n in classes)
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/annotation/JsonProperty.class" in names


def test_runtime_jar_matches_pysparks_spark_and_scala(tmp_path: Path) -> None:
    assert sparksql.runtime_jar().name.startswith("iceberg-spark-runtime-3.5_2.12-")
    fake = tmp_path / "jars"
    fake.mkdir()
    (fake / "spark-core_2.12-3.4.1.jar").touch()
    with pytest.raises(ConfigError, match=r"no iceberg-spark-runtime-3\.4_2\.12 jar.*make test"):
        sparksql.runtime_jar(fake)


def test_missing_jdbc_driver_names_package_and_remedy(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparksql, "POSTGRESQL_JDBC", tmp_path / "postgresql.jar")
    with pytest.raises(ConfigError, match=r"libpostgresql-jdbc-java.*make test"):
        sparksql.jdbc_driver("jdbc:postgresql://h/db")


def test_missing_jarjar_names_package_and_remedy(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sparksql, "JARJAR", tmp_path / "jarjar.jar")
    with pytest.raises(ConfigError, match=r"libjarjar-java.*make test"):
        sparksql.run_jarjar(tmp_path / "r", tmp_path / "i", tmp_path / "o")


# -- cdclake sql ---------------------------------------------------------------------------------


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
    monkeypatch.setattr(sparksql, "open_catalog", lambda config, create: None)
    monkeypatch.setattr(sparksql, "spark_session", lambda config: session)
    p = argparse.ArgumentParser()
    sparksql.add_sql_arguments(p)
    return sparksql.run_sql(p.parse_args(list(argv)), Config())


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
    monkeypatch.setattr(sparksql, "spark_session", pytest.fail)
    assert cli.main(["sql", "SELECT 1"]) == 2
    assert capsys.readouterr().err == (f"cdclake sql: error: no Iceberg catalog at "
                                       f"{tmp_path / 'catalog.db'} yet: nothing was merged\n")


def test_sql_max_rows_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["sql", "--max-rows", "0", "SELECT 1"])
    assert exit_.value.code == 2
    assert "--max-rows: must be at least 1" in capsys.readouterr().err
