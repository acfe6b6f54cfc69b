"""Iceberg's Spark catalog on the catalog pyiceberg writes: the settings a session needs.

The mirrors are plain Iceberg tables in a SQL catalog (SQLite by default, PostgreSQL in
production). Iceberg's ``JdbcCatalog`` reads pyiceberg's catalog tables as they are, so a Spark
session configured here sees the same tables under the same catalog name as
:func:`cdclake.lake.catalog.open_catalog`: both derive from
:meth:`cdclake.config.Config.iceberg_properties`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from cdclake.config import S3_SCHEMES, Config
from cdclake.errors import ConfigError

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
#: pyiceberg SQL catalog settings with no meaning to Iceberg's Java catalog
PYICEBERG_ONLY = frozenset({"type", "uri", "warehouse", "init_catalog_tables", "echo",
                            "pool_pre_ping", "py-io-impl"})


def is_sql(config: Config) -> bool:
    return config.catalog_properties.get("type", "sql") == "sql"


def jdbc_catalog(config: Config) -> tuple[str, dict[str, str]]:
    """The JDBC URL of pyiceberg's SQL catalog database, and its connection properties.

    ``sqlite:///path`` (SQLAlchemy) -> ``jdbc:sqlite:/abs/path``;
    ``postgresql+psycopg://user:pw@host:port/db?k=v`` -> ``jdbc:postgresql://host:port/db?k=v``
    with ``jdbc.user`` and ``jdbc.password`` (the JDBC URL carries no credentials).
    """
    uri = config.iceberg_properties()["uri"]
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
    <name>.`` prefix), derived from :meth:`~cdclake.config.Config.iceberg_properties` as
    pyiceberg's are: same database, same warehouse, same S3 settings and explicit extras."""
    props = config.iceberg_properties()
    uri, jdbc = jdbc_catalog(config)
    # V1: the layout pyiceberg's SQL catalog writes (iceberg_type tells tables from views)
    # init-catalog-tables off: pyiceberg creates the tables (the mirrors' callers open the catalog
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
