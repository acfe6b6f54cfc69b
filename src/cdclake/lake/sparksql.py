"""Spark SQL on the mirrors: Iceberg's own Spark runtime on the catalog pyiceberg writes.

The mirrors are plain Iceberg tables in a SQL catalog (SQLite by default, PostgreSQL in
production). Iceberg's ``JdbcCatalog`` reads pyiceberg's catalog tables as they are, so a Spark
session configured here sees the same tables under the same catalog name as
:func:`cdclake.lake.catalog.open_catalog`; ``cdclake sql`` and the maintenance job use it.

Maven Central is out of reach offline, so the jars come from elsewhere
(docs in ``SPARK_ICEBERG.md``): the runtime from the ``snowpark-connect-deps-iceberg`` wheel,
whose copy lacks Iceberg's relocated Jackson, which is rebuilt here once from pyspark's own
Jackson jars with Debian's ``jarjar`` and cached under the virtualenv (keyed by the inputs, so
another pyspark or runtime rebuilds it); the JDBC driver from Debian's ``sqlite-jdbc`` or
``postgresql`` jar. ``make test``/``make demo`` build the set at install
(``python -m cdclake.lake.sparksql --build``); a session builds it on first use otherwise.
Anything missing is one :class:`~cdclake.errors.ConfigError` naming it and the remedy.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from cdclake import sparkenv
from cdclake.config import Config, positive_int
from cdclake.errors import ConfigError, LakeError
from cdclake.lake.catalog import S3_SCHEMES, catalog_properties, open_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JARJAR = Path("/usr/share/java/jarjar.jar")
SQLITE_JDBC = Path("/usr/share/java/sqlite-jdbc.jar")
POSTGRESQL_JDBC = Path("/usr/share/java/postgresql.jar")
#: the runtime's references to Jackson point here (Iceberg's build relocates it the same way)
JACKSON_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1"
JACKSON_JARS = ("jackson-annotations", "jackson-core", "jackson-databind")
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
REMEDY = "run `make test` or `make demo` to install it"
#: pyiceberg SQL catalog settings with no meaning to Iceberg's Java catalog
PYICEBERG_ONLY = frozenset({"type", "uri", "warehouse", "init_catalog_tables", "echo",
                            "pool_pre_ping", "py-io-impl"})

#: runs ``java -jar jarjar.jar process rules in out`` (replaceable in tests)
Runner = Callable[[Path, Path, Path], None]


@dataclass(frozen=True)
class JarSet:
    """The jars a Spark driver and its executors need on their class path."""

    runtime: Path  #: iceberg-spark-runtime
    jackson: Path  #: pyspark's Jackson, relocated under org.apache.iceberg.shaded
    jdbc: Path  #: the catalog database's JDBC driver

    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in (self.runtime, self.jackson, self.jdbc))


# -- the jar set ------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where the built jar lives: inside the virtualenv, so removing it removes the jar."""
    return sparkenv.cache_dir() / "jars"


def pyspark_jars() -> Path:
    """pyspark's Spark jars. A driver spark-submit started imports pyspark from
    ``$SPARK_HOME/python/lib/pyspark.zip``: its jars are then ``$SPARK_HOME/jars``."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"Spark SQL needs pyspark, which is not installed: {REMEDY}")
    package = Path(next(iter(spec.submodule_search_locations)))
    if not package.is_dir() and os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"]) / "jars"
    return package / "jars"


def runtime_jar(spark_jars: Path | None = None) -> Path:
    """Iceberg's Spark runtime for this pyspark's Spark and Scala versions, from the
    ``snowpark-connect-deps-iceberg`` wheel (the newest Iceberg there is)."""
    spark_jars = spark_jars or pyspark_jars()
    core = sorted(spark_jars.glob("spark-core_*.jar"))
    m = re.match(r"spark-core_(\d+\.\d+)-(\d+\.\d+)\.", core[0].name) if core else None
    if m is None:
        raise ConfigError(f"Spark SQL: no spark-core jar in {spark_jars}: {REMEDY}")
    scala, spark = m.group(1), m.group(2)
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("Spark SQL needs Iceberg's Spark runtime (Python package "
                          f"snowpark-connect-deps-iceberg), which is not installed: {REMEDY}")
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    found = sorted(jars.glob(f"iceberg-spark-runtime-{spark}_{scala}-*.jar"), key=_version_key)
    if not found:
        raise ConfigError(f"Spark SQL: no iceberg-spark-runtime-{spark}_{scala} jar in {jars} "
                          f"(Spark {spark}, Scala {scala}): {REMEDY}")
    return found[-1]


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.stem.rpartition("-")[2]))


def jackson_sources(spark_jars: Path | None = None) -> list[Path]:
    """pyspark's jackson-annotations, -core and -databind (one of each)."""
    spark_jars = spark_jars or pyspark_jars()
    out = []
    for name in JACKSON_JARS:
        found = sorted(spark_jars.glob(f"{name}-[0-9]*.jar"))
        if not found:
            raise ConfigError(f"Spark SQL: no {name} jar in {spark_jars}: {REMEDY}")
        out.append(found[-1])
    return out


def cache_key(runtime: Path, sources: Sequence[Path]) -> str:
    """Names and sizes of the inputs and the rule: another pyspark or runtime, another key."""
    h = hashlib.sha256(JACKSON_RULE.encode())
    for p in (runtime, *sources):
        h.update(f"\0{p.name}\0{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def run_jarjar(rules: Path, src: Path, dest: Path) -> None:
    """Debian's jarjar on the Java Spark runs on."""
    if not JARJAR.exists():
        raise ConfigError(f"Spark SQL needs {JARJAR} (Debian package libjarjar-java) to build "
                          f"Iceberg's relocated Jackson once: {REMEDY}")
    java = _java()
    out = subprocess.run([java, "-jar", str(JARJAR), "process", str(rules), str(src), str(dest)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0 or not dest.exists():
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"jarjar could not relocate Jackson into {dest} "
                          f"(exit {out.returncode}): {tail[0]}")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ConfigError("Spark SQL needs a Java runtime (java on PATH or JAVA_HOME; Debian "
                          f"package openjdk-17-jre-headless): {REMEDY}")
    return java


def relocated_jackson(sources: Sequence[Path], key: str, cache: Path, *,
                      runner: Runner = run_jarjar) -> Path:
    """The relocated Jackson jar for ``key`` in ``cache``, built when absent.

    The three jars are merged into one (their META-INF left out: manifests and module
    descriptors that would clash) and relocated in one pass. Built in a temporary file beside
    the target and renamed into place, so a concurrent or killed build never leaves a partial
    jar under the final name; jars of other keys are removed.
    """
    target = cache / f"iceberg-jackson-relocated-{key}.jar"
    if target.exists():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=cache) as tmp:
            work = Path(tmp)
            merged = work / "jackson.jar"
            seen: set[str] = set()
            with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as out:
                for source in sources:
                    with zipfile.ZipFile(source) as jar:
                        for info in jar.infolist():
                            if (info.filename.startswith("META-INF/") or info.filename in seen
                                    or info.filename.endswith("module-info.class")):
                                continue
                            seen.add(info.filename)
                            out.writestr(info, jar.read(info))
            rules = work / "rules.txt"
            rules.write_text(JACKSON_RULE + "\n")
            built = work / "relocated.jar"
            runner(rules, merged, built)
            os.replace(built, target)
        for old in cache.glob("iceberg-jackson-relocated-*.jar"):
            if old != target:
                old.unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot build Iceberg's relocated Jackson in {cache}: "
                          f"{exc.strerror or exc}") from exc
    return target


def jdbc_driver(uri: str) -> Path:
    """Debian's JDBC driver for the catalog database of ``uri`` (a JDBC URL)."""
    if uri.startswith("jdbc:sqlite:"):
        jar, package = SQLITE_JDBC, "libxerial-sqlite-jdbc-java"
    elif uri.startswith("jdbc:postgresql:"):
        jar, package = POSTGRESQL_JDBC, "libpostgresql-jdbc-java"
    else:
        raise ConfigError(f"Spark SQL: no JDBC driver known for catalog URI {uri}")
    if not jar.exists():
        raise ConfigError(f"Spark SQL needs {jar} (Debian package {package}) to read the "
                          f"Iceberg catalog: {REMEDY}")
    return jar


def ensure_jars(config: Config, *, cache: Path | None = None) -> JarSet:
    """The jar set for ``config``'s catalog, building the relocated Jackson if needed."""
    spark_jars = pyspark_jars()
    runtime = runtime_jar(spark_jars)
    sources = jackson_sources(spark_jars)
    jackson = relocated_jackson(sources, cache_key(runtime, sources), cache or cache_dir())
    uri = jdbc_catalog(config)[0] if _is_sql(config) else "jdbc:sqlite:"
    return JarSet(runtime, jackson, jdbc_driver(uri))


# -- the configuration -------------------------------------------------------------------------


def _is_sql(config: Config) -> bool:
    return config.catalog_properties.get("type", "sql") == "sql"


def jdbc_catalog(config: Config) -> tuple[str, dict[str, str]]:
    """The JDBC URL of pyiceberg's SQL catalog database, and its connection properties.

    ``sqlite:///path`` (SQLAlchemy) -> ``jdbc:sqlite:/abs/path``;
    ``postgresql+psycopg://user:pw@host:port/db?k=v`` -> ``jdbc:postgresql://host:port/db?k=v``
    with ``jdbc.user`` and ``jdbc.password`` (the JDBC URL carries no credentials).
    """
    uri = catalog_properties(config)["uri"]
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///")
        if not path or path.startswith(":memory:"):
            raise ConfigError(f"Spark SQL cannot share an in-memory SQLite catalog ({uri})")
        return f"jdbc:sqlite:{Path(path).resolve()}", {}
    parts = urlsplit(uri)
    if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ConfigError(f"Spark SQL reads a SQL catalog on SQLite or PostgreSQL; catalog URI "
                          f"{uri} is neither")
    if not parts.hostname:
        raise ConfigError(f"Spark SQL: catalog URI {uri} names no host (JDBC cannot use a "
                          "Unix socket); give host[:port]")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{parts.port}" if parts.port else host
    url = f"jdbc:postgresql://{netloc}{parts.path}" + (f"?{parts.query}" if parts.query else "")
    props = {}
    if parts.username:
        props["jdbc.user"] = unquote(parts.username)
    if parts.password is not None:
        props["jdbc.password"] = unquote(parts.password)
    return url, props


def catalog_conf(config: Config) -> dict[str, str]:
    """Iceberg's Spark catalog properties for ``config`` (without the ``spark.sql.catalog.
    <name>.`` prefix), derived as :func:`~cdclake.lake.catalog.catalog_properties` derives
    pyiceberg's: same database, same warehouse, same S3 settings and explicit extras."""
    props = catalog_properties(config)
    uri, jdbc = jdbc_catalog(config)
    # V1: the layout pyiceberg's SQL catalog writes (iceberg_type tells tables from views)
    # init-catalog-tables off: pyiceberg creates the tables (spark_session opens the catalog
    # first), and Iceberg's check leaves a result set open, so a SQLite connection of the pool
    # would keep reading the catalog as it was then (tables pyiceberg adds later not found)
    conf = {"type": "jdbc", "uri": uri, "warehouse": props["warehouse"],
            "jdbc.schema-version": "V1", "jdbc.init-catalog-tables": "false",
            "default-namespace": config.namespace, **jdbc}
    # S3FileIO only for a warehouse on S3: an S3 store (the WAL, the change stream) with a
    # local warehouse needs none of it, and the AWS SDK is not part of the runtime jar
    if props["warehouse"].startswith(S3_SCHEMES):
        conf["io-impl"] = S3_FILE_IO
        if "s3.endpoint" in props:
            conf["s3.path-style-access"] = "true"  # MinIO, moto: no bucket subdomains
    for key, value in props.items():
        if key in PYICEBERG_ONLY:
            continue
        conf["client.region" if key == "s3.region" else key] = value
    return conf


def spark_conf(config: Config, jars: JarSet, master: str = "local") -> dict[str, str]:
    """Every Spark setting the mirrors need: class path, extensions, the catalog (named
    ``config.catalog_name``, the session's default, so ``<namespace>.<table>`` resolves).

    The driver has the jars on its class path. Executors of ``local`` are the driver's JVM;
    any other ``master``'s get the runtime and its Jackson sent (``spark.jars``): they read
    and write data files, and only the driver talks to the catalog's database.

    A catalog other than SQL (REST, Glue, Hive) is the user's to configure through
    ``spark_conf`` (``spark.sql.catalog.<name>.*``); only the jars and extensions come from here.
    """
    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    conf = {"spark.driver.extraClassPath": jars.classpath(),
            "spark.sql.extensions": EXTENSIONS,
            "spark.sql.defaultCatalog": name}
    if sparkenv.is_local(master):
        conf["spark.executor.extraClassPath"] = jars.classpath()
    else:
        conf["spark.jars"] = f"{jars.runtime},{jars.jackson}"
    if _is_sql(config):
        conf[prefix] = SPARK_CATALOG
        conf.update({f"{prefix}.{k}": v for k, v in catalog_conf(config).items()})
    elif prefix not in config.spark_conf:
        raise ConfigError(f"Spark SQL derives only a SQL catalog's settings; catalog "
                          f"{name!r} is {config.catalog_properties['type']!r}: set "
                          f"{prefix}=org.apache.iceberg.spark.SparkCatalog and its options in "
                          "spark_conf")
    return conf


def spark_session(config: Config, *, cache: Path | None = None) -> SparkSession:
    """A session on ``config.spark_master`` that reads and writes the mirrors.

    ``config.spark_conf`` is applied last. The class path is read when the JVM starts: a
    process that already has a Spark session without it must stop that one first.
    """
    jars = ensure_jars(config, cache=cache)
    if _is_sql(config):
        open_catalog(config)  # creates the catalog's tables (see catalog_conf)
    _drop_jvm_without_iceberg()
    conf = {"spark.sql.session.timeZone": "UTC", **spark_conf(config, jars, config.spark_master)}
    spark = sparkenv.builder(config, "sql", conf).getOrCreate()
    sparkenv.ship(spark)
    return spark


def _drop_jvm_without_iceberg() -> None:
    """Stop this process's Spark JVM if it cannot load Iceberg's catalog: pyspark keeps one
    JVM per process, and a new session on it would keep the old class path."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    if gateway is None:
        return
    try:
        gateway.jvm.java.lang.Class.forName(SPARK_CATALOG)
        return
    except Py4JError:
        if sparkenv.submitted():
            raise ConfigError("spark-submit did not give this driver Iceberg's Spark runtime: "
                              "submit it with the settings spark_conf derives (spark.jars, "
                              "spark.driver.extraClassPath), as cdclake.pipeline.submit "
                              "does") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    elif SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM ends when its stdin closes
        proc.stdin.close()
        proc.wait(60)
    SparkContext._gateway = None
    SparkContext._jvm = None


# -- cdclake sql --------------------------------------------------------------------------------


def add_sql_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="Spark SQL; mirrors are <namespace>.<schema>__<table> "
                                 "(the catalog is the session's default)")
    p.add_argument("--max-rows", type=positive_int, default=100,
                   help="rows printed at most (default 100)")


def run_sql(args: argparse.Namespace, config: Config) -> int:
    """Run one query on the mirrors and print its result as Spark's table."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    open_catalog(config, create=False)  # no catalog yet, or a bad one: said before Spark starts
    spark = spark_session(config)
    try:
        spark.sql(args.query).show(n=args.max_rows, truncate=False)
    except (PySparkException, Py4JError) as exc:
        raise LakeError(f"query failed: {sparkenv.error_line(exc)}") from None
    finally:
        spark.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cdclake.lake.sparksql --build``: build the jar set at install time."""
    parser = argparse.ArgumentParser(prog="python -m cdclake.lake.sparksql",
                                     description=main.__doc__)
    parser.add_argument("--build", action="store_true", help="build the relocated Jackson jar")
    args = parser.parse_args(argv)
    if not args.build:
        parser.print_help()
        return 0
    try:
        spark_jars = pyspark_jars()
        runtime = runtime_jar(spark_jars)
        sources = jackson_sources(spark_jars)
        jackson = relocated_jackson(sources, cache_key(runtime, sources), cache_dir())
        drivers = [jdbc_driver(uri) for uri in ("jdbc:sqlite:", "jdbc:postgresql:")]
    except ConfigError as exc:
        print(f"cdclake sparksql: error: {exc}", file=sys.stderr)
        return 2
    print("Spark SQL jars: " + " ".join(str(p) for p in (runtime, jackson, *drivers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
