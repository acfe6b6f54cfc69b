"""The jars a Spark session needs for the mirrors: Iceberg's Spark runtime and the catalog
database's JDBC driver.

Maven Central is out of reach offline, so the jars come from elsewhere
(docs in ``SPARK_ICEBERG.md``): the runtime from the ``snowpark-connect-deps-iceberg`` wheel,
whose copy lacks Iceberg's relocated Jackson, which is rebuilt here once from pyspark's own
Jackson jars with Debian's ``jarjar`` and cached under the virtualenv (keyed by the inputs, so
another pyspark or runtime rebuilds it); the JDBC driver from Debian's ``sqlite-jdbc`` or
``postgresql`` jar. ``make test``/``make demo`` build the set at install
(``python -m cdclake.sparkenv.jars --build``); a session builds it on first use otherwise.
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

from cdclake.config import Config
from cdclake.errors import ConfigError
from cdclake.sparkenv import shipping
from cdclake.sparkenv.catalog import is_sql, jdbc_catalog

JARJAR = Path("/usr/share/java/jarjar.jar")
SQLITE_JDBC = Path("/usr/share/java/sqlite-jdbc.jar")
POSTGRESQL_JDBC = Path("/usr/share/java/postgresql.jar")
#: the runtime's references to Jackson point here (Iceberg's build relocates it the same way)
JACKSON_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1"
JACKSON_JARS = ("jackson-annotations", "jackson-core", "jackson-databind")
REMEDY = "run `make test` or `make demo` to install it"

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


def cache_dir() -> Path:
    """Where the built jar lives: inside the virtualenv, so removing it removes the jar."""
    return shipping.cache_dir() / "jars"


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
    out = subprocess.run([java(), "-jar", str(JARJAR), "process", str(rules), str(src), str(dest)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0 or not dest.exists():
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"jarjar could not relocate Jackson into {dest} "
                          f"(exit {out.returncode}): {tail[0]}")


def java() -> str:
    """The Java runtime Spark's scripts start (``JAVA_HOME``'s, else the one on PATH)."""
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
    uri = jdbc_catalog(config)[0] if is_sql(config) else "jdbc:sqlite:"
    return JarSet(runtime, jackson, jdbc_driver(uri))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cdclake.sparkenv.jars --build``: build the jar set at install time."""
    parser = argparse.ArgumentParser(prog="python -m cdclake.sparkenv.jars",
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
        print(f"cdclake sparkenv.jars: error: {exc}", file=sys.stderr)
        return 2
    print("Spark SQL jars: " + " ".join(str(p) for p in (runtime, jackson, *drivers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
