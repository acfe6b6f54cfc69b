"""The one configuration object, read from a TOML file and ``CDCLAKE_*`` environment variables.

Every component takes the :class:`Config` (or the part it needs) as an argument; nothing reads
the environment on its own. Precedence: explicit overrides > environment > file > defaults.
The defaults are the embedded local set-up (``make demo``): a local PostgreSQL, a local S3
endpoint, Spark ``local[*]`` and an Iceberg SQL catalog on SQLite under ``.cdclake/``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import UnionType
from typing import Any, get_args, get_type_hints

from cdclake.errors import ConfigError

#: values of ``snapshot_mode``
SNAPSHOT_MODES = ("initial", "never")
#: URL schemes of a warehouse on S3
S3_SCHEMES = ("s3://", "s3a://", "s3n://")

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(B|kB|KB|K|MB|M|GB|G|TB)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1024, "k": 1024, "mb": 1024**2, "m": 1024**2, "gb": 1024**3,
          "g": 1024**3, "tb": 1024**4}


def parse_size(text: str | int) -> int:
    """``'64kB'`` -> 65536, in PostgreSQL's memory units (kB = 1024 bytes)."""
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ConfigError(f"not a size: {text!r} (use e.g. 64kB, 64MB, 1GB)")
    return int(m.group(1)) * _UNITS[(m.group(2) or "B").lower()]


def positive_int(text: str) -> int:
    """A whole number of at least 1 (an argument type: ValueError names what is wrong)."""
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise ValueError(f"must be at least 1, got {n}")
    return n


def default_home() -> Path:
    """``.cdclake`` in the working directory: the home when none is configured."""
    return Path(".cdclake").resolve()


@dataclass(slots=True)
class Config:
    """What a cdclake run needs to know. Field docs give the env var and default."""

    #: CDCLAKE_HOME: working directory for local state (spill, catalog, reports, logs,
    #: services); default ``.cdclake`` in the directory the command runs in, which every
    #: command that uses it says (:meth:`defaults_in_use`).
    home: Path = field(default_factory=default_home)
    #: CDCLAKE_SOURCE_DSN: libpq connection string of the source database.
    source_dsn: str = ""
    #: CDCLAKE_ARCHIVE_DIR: local directory PostgreSQL archives WAL to (``ship --from``).
    archive_dir: Path | None = None
    #: CDCLAKE_SHIP_UPLOADS: segments ``ship`` uploads at once (each a file read, a SHA-256
    #: and a store round trip); their manifest entries are recorded in order all the same.
    ship_uploads: int = 4
    #: CDCLAKE_STORE_URL: ``s3://bucket/prefix``, ``file:///path/prefix`` or an absolute path
    #: (a relative one is refused: archive_command would resolve it inside the data directory).
    store_url: str = ""
    #: CDCLAKE_S3_ENDPOINT_URL: S3 endpoint (MinIO, moto_server); empty = AWS.
    s3_endpoint_url: str = ""
    #: CDCLAKE_S3_REGION
    s3_region: str = "us-east-1"
    #: CDCLAKE_S3_ACCESS_KEY_ID / CDCLAKE_S3_SECRET_ACCESS_KEY (else boto3's own chain).
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    #: CDCLAKE_DDL_KEY_FILE: the key that authenticates the source's ``cdclake.ddl`` messages
    #: (hex, mode 0600); default ``ddl.key`` in the home directory, where ``cdclake source
    #: install`` writes it, else read from the source through the DSN.
    ddl_key_file: Path | None = None
    #: CDCLAKE_STREAM: name of the source stream (one prefix, one progress state).
    stream: str = "main"
    #: CDCLAKE_DATABASE: database name decoded (gate 1); empty = the DSN's database.
    database: str = ""
    #: CDCLAKE_WORK_MEM: reorder-buffer memory before spilling (logical_decoding_work_mem).
    work_mem: int = 64 * 1024 * 1024
    #: CDCLAKE_SPILL_DIR: local directory for spill files while decoding.
    spill_dir: Path | None = None
    #: CDCLAKE_SPARK_MASTER
    spark_master: str = "local[*]"
    #: CDCLAKE_SPARK_CONN_ID: the Airflow connection the DAGs submit Spark steps through
    #: (cdclake.pipeline.submit); when Airflow has none by that id, ``spark_master`` is it.
    spark_conn_id: str = "spark_default"
    #: CDCLAKE_SPARK_PARTITIONS: reorder-buffer partitions (transactions by top-level xid;
    #: each partition reads the whole batch of WAL and keeps its own).
    spark_partitions: int = 2
    #: CDCLAKE_SPARK_CONF: Spark settings ``k=v,k=v`` (a table in the TOML file), applied
    #: last: e.g. ``spark.driver.memory=1g,spark.driver.maxResultSize=64m``.
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: CDCLAKE_MAX_BATCH_SEGMENTS / CDCLAKE_MAX_BATCH_BYTES: the most WAL one batch decodes
    #: (segments, and their bytes); a longer backlog becomes several batches in one run.
    max_batch_segments: int = 256
    max_batch_bytes: int = 1024**3
    #: CDCLAKE_CATALOG_NAME / CDCLAKE_CATALOG_URI / CDCLAKE_WAREHOUSE: pyiceberg catalog.
    catalog_name: str = "cdclake"
    catalog_uri: str = ""
    catalog_properties: dict[str, str] = field(default_factory=dict)
    warehouse: str = ""
    #: CDCLAKE_MERGE_ENGINE: ``pyiceberg`` — the merge replays each table's batch in this
    #: process and rewrites the data files it touches (copy-on-write); ``spark`` — one
    #: ``MERGE INTO`` per table on Iceberg's Spark runtime, writing position deletes
    #: (merge-on-read), for the tables it can take (cdclake.lake.sparkmerge; the others go
    #: to the pyiceberg merge and the report says why).
    merge_engine: str = "pyiceberg"
    #: CDCLAKE_MERGE_MAX_ROWS: the most changes one merge takes at once. Consecutive
    #: validated batches are merged together up to it, one commit per table for all of them
    #: (a batch with more goes alone): a copy-on-write merge rewrites every data file holding
    #: a touched row, so a backlog of batches updating rows all over a table rewrote it once
    #: a batch. The merge holds the keys it touches (16 bytes a key): 16M changes peaked at
    #: 1.33 GB in bench/scale.py at pgbench scale 160 (16M distinct keys inserted).
    merge_max_rows: int = 16_000_000
    #: CDCLAKE_QUALITY_CHUNK_ROWS: the most rows the stream suite (change rows: a table's
    #: batch in chunks of whole Parquet files, order kept across them) or the mirror suite
    #: (mirror rows, keys compared across chunks) validates at once; a chunk also holds at
    #: most 128 MB of the checked columns. Each chunk is a GX run of its own (some 0.3 s
    #: whatever its size) and a Data Docs page.
    quality_chunk_rows: int = 1_000_000
    #: CDCLAKE_QUALITY_KEEP_RESULTS: the validation results (and their Data Docs pages) kept
    #: per table and suite; older ones are dropped as new ones come (the Data Docs index is
    #: rendered from all that are kept, at every check).
    quality_keep_results: int = 100
    #: CDCLAKE_NAMESPACE: Iceberg namespace for mirror tables.
    namespace: str = "cdc"
    #: CDCLAKE_TABLES: comma-separated ``schema.table`` to mirror; empty = all. The decode
    #: leaves out every other table's changes, so a name that selects nothing — one neither
    #: the stream's dictionary nor the source knows, or a partitioned table (name its
    #: partitions) — stops the run before it decodes (:func:`cdclake.lake.batch.unselectable`).
    tables: list[str] = field(default_factory=list)
    #: CDCLAKE_EXCLUDE_TABLES: comma-separated ``schema.table`` never to mirror, whatever
    #: ``tables`` says: their changes are not decoded, they are neither snapshotted nor merged.
    exclude_tables: list[str] = field(default_factory=list)
    #: CDCLAKE_SNAPSHOT_MODE: ``initial`` — a run first copies the current rows of every table
    #: in scope that has no mirror yet (an initial snapshot); ``never`` — mirrors hold only what
    #: the change stream brings.
    snapshot_mode: str = "initial"
    #: CDCLAKE_SNAPSHOT_CHUNK_SIZE: table bytes (heap blocks) one snapshot copy task reads. A
    #: task streams its chunk (its memory does not grow with it), while every task costs a
    #: Spark launch, a session and a file: 256MB copied 4M rows a table 1.2-1.5x faster than
    #: 64MB (bench/snapshot.py).
    snapshot_chunk_size: int = 256 * 1024 * 1024
    #: CDCLAKE_SNAPSHOT_WAIT: seconds the snapshot waits for transactions older than the
    #: install to end before it gives up.
    snapshot_wait: float = 300.0
    #: CDCLAKE_LEASE_TTL: seconds a run's lease on the stream (decoding, the lake) lasts without
    #: renewal; a run renews it every third of that (cdclake.archive.lease).
    lease_ttl: float = 60.0
    #: CDCLAKE_LEASE_WAIT: seconds a run waits for another run's lease before it refuses.
    lease_wait: float = 120.0
    #: CDCLAKE_FOLLOW_POLL: seconds ``cdclake run --follow`` waits between two looks at the
    #: archive (one listing of the segment manifest, and of ``archive_dir`` when it ships one).
    follow_poll: float = 2.0
    #: CDCLAKE_FOLLOW_FOR: seconds one Spark application of the ``cdclake_follow`` DAG follows
    #: the archive before it ends and the continuous DAG starts the next (its log rolls over,
    #: its JVM starts afresh); ``cdclake run --follow`` follows until it is stopped.
    follow_for: float = 3600.0
    #: CDCLAKE_SCHEDULE: Airflow schedule of the ingest DAG.
    schedule: str = "*/10 * * * *"
    #: CDCLAKE_MAINTENANCE_SCHEDULE: Airflow schedule of the maintenance DAG.
    maintenance_schedule: str = "0 3 * * *"
    #: CDCLAKE_KEEP_SNAPSHOTS / CDCLAKE_KEEP_HOURS: maintenance expires a table's snapshots
    #: beyond the newest ``keep_snapshots`` once older than ``keep_hours``, and removes files
    #: no snapshot references once older than ``keep_hours``.
    keep_snapshots: int = 10
    keep_hours: float = 24.0

    # -- derived paths -------------------------------------------------------------------

    def spill_path(self) -> Path:
        return self.spill_dir if self.spill_dir is not None else self.home / "spill"

    def reports_path(self) -> Path:
        return self.home / "reports"

    def logs_path(self) -> Path:
        """Logs for people, not results: the Spark JVM's (``spark.log``, whatever a failed
        task left in it) and the traceback of any error cdclake did not foresee
        (``cdclake.log``), each command printing one line."""
        return self.home / "logs"

    def effective_store_url(self) -> str:
        return self.store_url or (self.home / "store").resolve().as_uri()

    def effective_catalog_uri(self) -> str:
        return self.catalog_uri or f"sqlite:///{(self.home / 'catalog.db').resolve()}"

    def effective_warehouse(self) -> str:
        return self.warehouse or (self.home / "warehouse").resolve().as_uri()

    def iceberg_properties(self) -> dict[str, str]:
        """The Iceberg catalog's properties, as pyiceberg takes them (explicit
        ``catalog_properties`` win): pyiceberg's catalog and Spark's Iceberg catalog are both
        derived from these, so both see the same tables in the same warehouse."""
        props: dict[str, str] = {"warehouse": self.effective_warehouse()}
        if self.catalog_properties.get("type", "sql") == "sql":
            props["uri"] = self.effective_catalog_uri()
        elif self.catalog_uri:
            props["uri"] = self.catalog_uri
        if props["warehouse"].startswith(S3_SCHEMES) or self.s3_endpoint_url:
            s3 = {"s3.endpoint": self.s3_endpoint_url, "s3.region": self.s3_region,
                  "s3.access-key-id": self.s3_access_key_id,
                  "s3.secret-access-key": self.s3_secret_access_key}
            props.update({k: v for k, v in s3.items() if v})
        props.update(self.catalog_properties)
        return props

    def defaults_in_use(self) -> dict[str, str]:
        """The home and the store, by name, where this configuration leaves them at their
        defaults: the home is then ``.cdclake`` in whatever directory the command runs in,
        and commands say so rather than fill a directory nobody chose."""
        out = {}
        if self.home == default_home():
            out["home"] = str(self.home)
        if not self.store_url:
            out["store"] = self.effective_store_url()
        return out

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path | None = None, env: dict[str, str] | None = None,
             **overrides: Any) -> Config:
        """Build from defaults, then the TOML file (``path`` or CDCLAKE_CONFIG), env, overrides.

        Every value is checked against its field's type before it is used (:func:`_check`),
        so a wrong one is one ConfigError naming the key, where it came from (the file, the
        variable) and what it must be — never a TypeError deep inside a run."""
        env = dict(os.environ) if env is None else env
        values: dict[str, tuple[Any, str]] = {}  # name -> (value, where it came from)
        file = path or env.get("CDCLAKE_CONFIG")
        if file:
            values.update((k, (v, f"in configuration file {file}"))
                          for k, v in _read_file(file).items())
        for f in fields(cls):
            key = "CDCLAKE_" + f.name.upper()
            if key in env and env[key] != "":
                values[f.name] = (env[key], f"from {key}")
        values.update((k, (v, "as an argument")) for k, v in overrides.items() if v is not None)
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            wheres = sorted({values[k][1] for k in unknown})
            raise ConfigError(f"unknown configuration keys: {', '.join(sorted(unknown))} "
                              f"({'; '.join(wheres)})")
        out = {}
        for name, (value, where) in values.items():
            try:
                out[name] = _coerce(name, _check(name, value))
            except ConfigError as exc:
                raise ConfigError(f"{exc} ({where})") from None
        return cls(**out)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


MERGE_ENGINES = ("pyiceberg", "spark")
_CHOICES = {"snapshot_mode": SNAPSHOT_MODES, "merge_engine": MERGE_ENGINES}


#: what a field of each declared type may be given as: TOML's own type, or the string an
#: environment variable carries (parsed by :func:`_coerce`)
_ACCEPTS: dict[Any, tuple[tuple[type, ...], str]] = {
    str: ((str,), "a string"),
    Path: ((str, Path), "a path (a non-empty string)"),
    int: ((int, str), "an integer"),
    float: ((int, float, str), "a number"),
    dict[str, str]: ((dict, str), "a table of strings"),
    list[str]: ((list, str), "an array of strings"),
}


@functools.cache
def _declared() -> dict[str, Any]:
    """Each field's declared type (``X | None`` as ``X``): the one declaration values are
    checked against."""
    out = {}
    for name, hint in get_type_hints(Config).items():
        args = [a for a in get_args(hint) if a is not type(None)]
        out[name] = args[0] if isinstance(hint, UnionType) and len(args) == 1 else hint
    return out


def _toml_type(value: Any) -> str:
    """What a value is, as TOML names it (never the value: it may be a secret)."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"  # TOML dates and times


def _check(name: str, value: Any) -> Any:
    """``value`` if its type may stand for field ``name``'s declared type, else ConfigError
    naming the key and the type expected. A boolean is no number, an array holds strings, a
    table scalars (written as strings), and a path is never empty (it would be the working
    directory)."""
    declared = _declared()[name]
    types, expected = _ACCEPTS[declared]
    if isinstance(value, bool) or not isinstance(value, types):
        raise ConfigError(f"{name} must be {expected}, got {_toml_type(value)}")
    if value == "" and declared is Path:
        raise ConfigError(f"{name} must be {expected}, got an empty string")
    if isinstance(value, list | dict):
        inner, allowed = (value, str) if isinstance(value, list) else (value.values(),
                                                                        str | int | float)
        bad = next((v for v in inner if not isinstance(v, allowed)), None)
        if bad is not None:
            raise ConfigError(f"{name} must be {expected}, got {_toml_type(value)} holding "
                              f"{_toml_type(bad)}")
    return value


def _read_file(file: str | Path) -> dict[str, Any]:
    """The settings of a TOML file: its ``[cdclake]`` table, or the whole file."""
    try:
        data = tomllib.loads(Path(file).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration file {file}: {exc}") from exc
    settings = data.get("cdclake", data)
    if not isinstance(settings, dict):
        raise ConfigError(f"cdclake must be a table ([cdclake]), got {_toml_type(settings)} "
                          f"(in configuration file {file})")
    return settings


#: the fields given in seconds, and the least each may be
_LEAST_SECONDS = {"snapshot_wait": 0.0, "lease_ttl": 1.0, "lease_wait": 0.0, "keep_hours": 0.0,
                  "follow_poll": 0.1, "follow_for": 1.0}


def _coerce(name: str, value: Any) -> Any:
    if name in ("home", "archive_dir", "spill_dir", "ddl_key_file"):
        return Path(value).expanduser().resolve()
    if name in ("work_mem", "snapshot_chunk_size", "max_batch_bytes"):
        try:
            size = parse_size(value)
        except ConfigError as exc:
            raise ConfigError(f"{name}: {exc}") from None
        if size < 1:
            raise ConfigError(f"{name} must be positive, got {value!r}")
        return size
    if name in _CHOICES:
        if value not in _CHOICES[name]:
            raise ConfigError(f"{name} must be one of {', '.join(_CHOICES[name])}, got "
                              f"{value!r}")
        return value
    if name in _LEAST_SECONDS:
        try:
            seconds = float(value)
        except ValueError as exc:
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from exc
        if not math.isfinite(seconds):
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
        if seconds < _LEAST_SECONDS[name]:
            raise ConfigError(f"{name} must be at least {_LEAST_SECONDS[name]:g} seconds, "
                              f"got {value!r}")
        return seconds
    if name in ("spark_partitions", "max_batch_segments", "keep_snapshots",
                "quality_chunk_rows", "quality_keep_results", "merge_max_rows",
                "ship_uploads"):
        try:
            n = int(value)
        except ValueError as exc:
            raise ConfigError(f"{name} must be an integer, got {value!r}") from exc
        if n < 1:
            raise ConfigError(f"{name} must be at least 1, got {value!r}")
        return n
    if name in ("spark_conf", "catalog_properties"):
        return _settings(name, value)
    if name in ("tables", "exclude_tables") and isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    return value


def _settings(name: str, value: Any) -> dict[str, str]:
    """``k=v,k=v`` (or a TOML table) as a dict; an item without ``=`` is refused."""
    if isinstance(value, dict):  # TOML scalars, as Spark and pyiceberg read settings
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in value.items()}
    out: dict[str, str] = {}
    for item in str(value).split(","):
        if not item.strip():
            continue
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{name}: {item.strip()!r} is not key=value")
        out[key.strip()] = val.strip()
    return out
