"""Spark SQL's view of the mirrors' catalog, and the jar set, without starting Spark.

The Spark catalog must point at the very database and warehouse pyiceberg uses (the same
derivation from the Config); the relocated Jackson jar is built once per set of inputs, in
place atomically. One test runs Debian's jarjar for real on pyspark's smallest Jackson jar.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.sparkenv import catalog as sparkcatalog
from cdclake.sparkenv import jars, session
from cdclake.sparkenv.jars import JarSet

JARS = JarSet(Path("/j/runtime.jar"), Path("/j/jackson.jar"), Path("/j/sqlite.jar"))


def _config(tmp_path: Path, **kw: Any) -> Config:
    return Config(home=tmp_path / "home", **kw)


# -- the catalog -------------------------------------------------------------------------------


def test_default_sqlite_catalog_is_pyicebergs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    conf = sparkcatalog.catalog_conf(config)
    py = config.iceberg_properties()
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
    assert sparkcatalog.catalog_conf(config)["uri"] == f"jdbc:sqlite:{tmp_path / 'rel' / 'cat.db'}"


def test_postgresql_uri_moves_credentials_to_properties(tmp_path: Path) -> None:
    config = _config(tmp_path, catalog_uri="postgresql+psycopg://ice%40berg:p%3Ass%2Fw@db.example"
                                           ":5433/lake?sslmode=require",
                     warehouse="file:///data/wh", catalog_name="prod", namespace="mirrors")
    conf = sparkcatalog.catalog_conf(config)
    assert conf["uri"] == "jdbc:postgresql://db.example:5433/lake?sslmode=require"
    assert conf["jdbc.user"] == "ice@berg" and conf["jdbc.password"] == "p:ss/w"
    assert conf["warehouse"] == "file:///data/wh" and conf["default-namespace"] == "mirrors"
    spark = session.spark_conf(config, JarSet(JARS.runtime, JARS.jackson,
                                               Path("/j/postgresql.jar")))
    assert spark["spark.sql.catalog.prod"] == sparkcatalog.SPARK_CATALOG
    assert spark["spark.sql.catalog.prod.jdbc.password"] == "p:ss/w"
    assert spark["spark.sql.defaultCatalog"] == "prod"


def test_postgresql_without_password_and_ipv6(tmp_path: Path) -> None:
    url, props = sparkcatalog.jdbc_catalog(_config(tmp_path,
                                               catalog_uri="postgresql://u@[::1]/lake"))
    assert url == "jdbc:postgresql://[::1]/lake" and props == {"jdbc.user": "u"}


@pytest.mark.parametrize(("uri", "words"), [
    ("postgresql+psycopg:///lake?host=/run/postgresql", "no host"),
    ("mysql://u:p@h/db", "neither"),
    ("sqlite:///:memory:", "in-memory"),
])
def test_catalog_uris_spark_cannot_use(tmp_path: Path, uri: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        sparkcatalog.catalog_conf(_config(tmp_path, catalog_uri=uri))


def test_s3_warehouse_gets_s3_file_io(tmp_path: Path) -> None:
    config = _config(tmp_path, warehouse="s3://bucket/wh", s3_endpoint_url="http://127.0.0.1:9000",
                     s3_region="eu-west-1", s3_access_key_id="AK", s3_secret_access_key="SK")
    conf = sparkcatalog.catalog_conf(config)
    assert conf["io-impl"] == sparkcatalog.S3_FILE_IO
    assert {k: conf[k] for k in ("s3.endpoint", "s3.access-key-id", "s3.secret-access-key",
                                 "client.region", "s3.path-style-access")} == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK", "client.region": "eu-west-1",
        "s3.path-style-access": "true"}
    assert "s3.region" not in conf


def test_explicit_catalog_properties_pass_but_pyicebergs_own_do_not(tmp_path: Path) -> None:
    config = _config(tmp_path, catalog_properties={"type": "sql", "echo": "true",
                                                   "jdbc.verifyServerCertificate": "false"})
    conf = sparkcatalog.catalog_conf(config)
    assert conf["jdbc.verifyServerCertificate"] == "false"
    assert "echo" not in conf and conf["type"] == "jdbc"


def test_spark_conf_has_class_path_and_extensions(tmp_path: Path) -> None:
    conf = session.spark_conf(_config(tmp_path), JARS)
    assert conf["spark.driver.extraClassPath"] == "/j/runtime.jar:/j/jackson.jar:/j/sqlite.jar"
    assert conf["spark.executor.extraClassPath"] == conf["spark.driver.extraClassPath"]
    assert conf["spark.sql.extensions"] == sparkcatalog.EXTENSIONS
    assert conf["spark.sql.catalog.cdclake"] == sparkcatalog.SPARK_CATALOG
    assert conf["spark.sql.catalog.cdclake.type"] == "jdbc"


def test_other_catalog_types_are_the_users_to_configure(tmp_path: Path) -> None:
    rest = {"type": "rest"}
    with pytest.raises(ConfigError, match=r"spark\.sql\.catalog\.cdclake=.*spark_conf"):
        session.spark_conf(_config(tmp_path, catalog_properties=rest), JARS)
    own = {"spark.sql.catalog.cdclake": sparkcatalog.SPARK_CATALOG}
    conf = session.spark_conf(_config(tmp_path, catalog_properties=rest, spark_conf=own), JARS)
    assert "spark.sql.catalog.cdclake" not in conf and "spark.sql.extensions" in conf
    assert conf["spark.sql.defaultCatalog"] == "cdclake"


def test_a_session_that_never_reads_the_mirrors_needs_no_catalog(tmp_path: Path) -> None:
    """The decode and the snapshot open the same session without the mirrors' catalog: a
    REST catalog with no Spark settings does not stop them."""
    conf = session.spark_conf(_config(tmp_path, catalog_properties={"type": "rest"}), JARS,
                              mirrors=False)
    assert not any(k.startswith("spark.sql.catalog") for k in conf)
    assert "spark.sql.defaultCatalog" not in conf
    assert conf["spark.driver.extraClassPath"] == JARS.classpath()


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
        assert rules.read_text().strip() == jars.JACKSON_RULE
        with zipfile.ZipFile(src) as z:
            self.inputs.append(set(z.namelist()))
        dest.write_bytes(src.read_bytes())


def test_relocated_jar_is_built_once_per_key(tmp_path: Path) -> None:
    sources = [_jar(tmp_path / "a.jar", {"META-INF/MANIFEST.MF": b"m", "com/x/A.class": b"a",
                                         "module-info.class": b"mi"}),
               _jar(tmp_path / "b.jar", {"META-INF/MANIFEST.MF": b"m", "com/x/B.class": b"b"})]
    cache = tmp_path / "cache"
    runner = FakeJarjar()
    first = jars.relocated_jackson(sources, "k1", cache, runner=runner)
    assert runner.inputs == [{"com/x/A.class", "com/x/B.class"}]
    assert jars.relocated_jackson(sources, "k1", cache, runner=runner) == first
    assert len(runner.inputs) == 1  # reused
    second = jars.relocated_jackson(sources, "k2", cache, runner=runner)
    assert second != first and len(runner.inputs) == 2
    assert sorted(p.name for p in cache.iterdir()) == [second.name]  # old key removed


def test_failed_build_leaves_nothing_under_the_final_name(tmp_path: Path) -> None:
    source = _jar(tmp_path / "a.jar", {"com/x/A.class": b"a"})

    def broken(rules: Path, src: Path, dest: Path) -> None:
        dest.write_bytes(b"partial")
        raise ConfigError("jarjar failed")

    with pytest.raises(ConfigError, match="jarjar failed"):
        jars.relocated_jackson([source], "k", tmp_path / "cache", runner=broken)
    assert list((tmp_path / "cache").iterdir()) == []


def test_cache_key_follows_the_inputs(tmp_path: Path) -> None:
    a = _jar(tmp_path / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar", {"x": b"1"})
    b = _jar(tmp_path / "jackson-core-2.15.2.jar", {"y": b"2"})
    c = _jar(tmp_path / "jackson-core-2.15.3.jar", {"y": b"2"})
    assert jars.cache_key(a, [b]) == jars.cache_key(a, [b])
    assert jars.cache_key(a, [b]) != jars.cache_key(a, [c])


def test_jarjar_relocates_pysparks_jackson(tmp_path: Path) -> None:
    """The real tool on the real input (the smallest of the three jars)."""
    annotations = [p for p in jars.jackson_sources() if "annotations" in p.name]
    out = jars.relocated_jackson(annotations, "real", tmp_path)
    names = zipfile.ZipFile(out).namelist()
    classes = [n for n in names if n.endswith(".class")]
    assert classes and all(
        n.startswith("org/apache/iceberg/shaded/com/fasterxml/jackson/") for n in classes)
    assert "org/apache/iceberg/shaded/com/fasterxml/jackson/annotation/JsonProperty.class" in names


def test_runtime_jar_matches_pysparks_spark_and_scala(tmp_path: Path) -> None:
    assert jars.runtime_jar().name.startswith("iceberg-spark-runtime-3.5_2.12-")
    fake = tmp_path / "jars"
    fake.mkdir()
    (fake / "spark-core_2.12-3.4.1.jar").touch()
    with pytest.raises(ConfigError, match=r"no iceberg-spark-runtime-3\.4_2\.12 jar.*make test"):
        jars.runtime_jar(fake)


def test_missing_jdbc_driver_names_package_and_remedy(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "POSTGRESQL_JDBC", tmp_path / "postgresql.jar")
    with pytest.raises(ConfigError, match=r"libpostgresql-jdbc-java.*make test"):
        jars.jdbc_driver("jdbc:postgresql://h/db")


def test_missing_jarjar_names_package_and_remedy(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jars, "JARJAR", tmp_path / "jarjar.jar")
    with pytest.raises(ConfigError, match=r"libjarjar-java.*make test"):
        jars.run_jarjar(tmp_path / "r", tmp_path / "i", tmp_path / "o")


# -- the driver's class-data archive -----------------------------------------------------------


def test_the_class_data_archive_is_named_by_jvm_and_class_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdclake.sparkenv import classdata

    monkeypatch.setattr(classdata.shipping, "cache_dir", lambda: tmp_path)
    path = classdata.archive(JARS)
    assert path.parent == tmp_path / "classdata" and path.suffix == ".jsa"
    assert classdata.java_options(JARS) == ""  # none built: the JVM starts as always
    other = JarSet(JARS.runtime, JARS.jackson, Path("/j/postgresql.jar"))
    assert classdata.archive(other) != path  # another class path: another archive
    path.parent.mkdir()
    path.write_bytes(b"")
    options = classdata.java_options(JARS)
    assert options.endswith(f" -XX:SharedArchiveFile={path}")
    assert options.startswith(classdata.QUIET)  # one it cannot map is passed over silently
    config = Config(home=tmp_path / "home")
    java = session.builder(config, "t", {}, java=options)._options[
        "spark.driver.extraJavaOptions"]
    assert java.endswith(options) and "-Dcdclake.spark.log=" in java
