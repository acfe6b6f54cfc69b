"""Opening the Iceberg catalog from :class:`~cdclake.config.Config`.

The default is pyiceberg's SQL catalog on a SQLite file under ``CDCLAKE_HOME`` with a local
warehouse: nothing to run. Production points ``catalog_properties`` at REST, Glue, Hive or a
SQL catalog on PostgreSQL (``type=rest``, ``uri=...``); those properties override the derived
ones. A warehouse on S3 gets the configured endpoint and credentials as pyiceberg ``s3.*``
properties, so a local S3 endpoint (MinIO, moto) works without environment variables.
Configuration comes only from the ``Config``: pyiceberg's own ``~/.pyiceberg.yaml`` and
``PYICEBERG_*`` variables are not consulted for the default SQL catalog.
"""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog

from cdclake.config import Config
from cdclake.errors import LakeError


def open_catalog(config: Config, *, create: bool = True) -> Catalog:
    """The configured catalog, ready to use (a SQLite file's directory is created).

    ``create=False`` opens it for reading only (``cdclake status``): a SQL catalog's tables
    are not created, and a SQLite catalog that does not exist yet is a LakeError saying so.
    """
    props = config.iceberg_properties()
    try:
        if props.get("type", "sql") == "sql":
            uri = props["uri"]
            if uri.startswith("sqlite:///"):
                path = Path(uri.removeprefix("sqlite:///"))
                if not create and not path.exists():
                    raise LakeError(f"no Iceberg catalog at {path} yet: nothing was merged")
                path.parent.mkdir(parents=True, exist_ok=True)
            if not create:
                props["init_catalog_tables"] = "false"
            props.pop("type", None)
            catalog = SqlCatalog(config.catalog_name, **props)
            if create and uri.startswith("sqlite:///"):
                _write_ahead_log(catalog)
            return catalog
        return load_catalog(config.catalog_name, **props)
    except LakeError:
        raise
    except Exception as exc:  # pyiceberg raises many unrelated types for a bad configuration
        raise LakeError(f"cannot open Iceberg catalog {config.catalog_name!r} "
                        f"({props.get('type', 'sql')}, uri {props.get('uri', '-')}): "
                        f"{type(exc).__name__}: {exc}") from exc


def _write_ahead_log(catalog: SqlCatalog) -> None:
    """Put a SQLite catalog in WAL mode (kept in the file: once is enough). In the default
    rollback mode a reader's lock blocks every writer: Spark's JDBC catalog keeps one between
    statements, so a commit beside it — pyiceberg's, or Spark's own from a second connection —
    failed with "database is locked"; two runs of the stream met it too."""
    with catalog.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
