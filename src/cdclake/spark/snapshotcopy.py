"""Executor side of the initial snapshot: one chunk of a table -> one mirror data file.

The driver exports a snapshot (``pg_export_snapshot()``, its transaction held open) and plans
each table as chunks of heap blocks; a worker joins that snapshot (``SET TRANSACTION
SNAPSHOT``, as ``pg_dump -j`` does), so every chunk sees the same committed state, copies its
blocks with a TID range scan and streams the rows — converted by
:class:`cdclake.lake.copyrows.CopyRows` in batches of ``batch_rows`` — into ONE Parquet file
laid out as the mirror's schema with its field ids, ready for pyiceberg's
``parquet_file_to_data_file``. A chunk is never held in memory whole.

An empty chunk still writes a valid Parquet file with zero rows, so every task has exactly one
file and the driver's bookkeeping is uniform; the driver skips (and may delete) files whose
result says ``rows == 0`` instead of adding them to the table.

A failure to read (psycopg.Error) or write (OSError) is retried ``attempts`` times with a
short backoff; the partial file is deleted each time. The last failure raises one line naming
the table, the chunk and its block range, and the cause — with the server's address but never
the DSN's password. Everything a task carries is plain data, so Spark can pickle it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow.parquet as pq
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.schema import Schema

from cdclake.catalog.model import RelationVersion, TypeInfo, type_from_json, type_to_json
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import LakeError, SourceError, TupleDecodeError
from cdclake.lake.copyrows import SESSION_SETTINGS, CopyRows, counts_only_columns

__all__ = ["ChunkResult", "ChunkTask", "copy_chunk", "types_from_json", "types_to_json"]

#: seconds before the second attempt; doubled for each further one
RETRY_BACKOFF_S = 0.5
APPLICATION_NAME = "cdclake-snapshot"
#: pyiceberg's default data file codec (write.parquet.compression-codec); decimals are
#: stored as pyiceberg stores them too (int32/int64 up to 18 digits, as the Iceberg spec allows)
COMPRESSION = "zstd"


@dataclass(frozen=True)
class ChunkTask:
    """One chunk of one table: heap blocks ``[first_block, end_block)`` of the snapshot."""

    table: str  #: "schema.name", for messages and the mirror's attnum lookup
    oid: int
    index: int  #: the chunk's number within the table
    first_block: int
    end_block: int | None  #: None: to the end of the table
    dsn: str
    snapshot_id: str  #: pg_export_snapshot() of the driver's open transaction
    relation: dict[str, Any]  #: RelationVersion.to_json()
    types: dict[str, Any]  #: :func:`types_to_json` of the types the relation decodes with
    schema_json: str  #: the mirror's current Schema, ``schema.model_dump_json()``
    commit_lsn: int  #: written into every row's _cdc_commit_lsn
    commit_ts_us: int  #: written into every row's _cdc_commit_ts (µs since 1970, UTC)
    location: str  #: full URI of the data file to write
    io_properties: dict[str, str] = field(default_factory=dict)  #: pyiceberg FileIO properties
    batch_rows: int = 50_000
    attempts: int = 3

    def blocks(self) -> str:
        end = "end" if self.end_block is None else str(self.end_block)
        return f"blocks {self.first_block}..{end}"

    def where(self) -> str:
        return f"snapshot copy of {self.table} chunk {self.index} ({self.blocks()})"


@dataclass
class ChunkResult:
    table: str
    oid: int
    index: int
    path: str  #: the data file (written even when ``rows`` is 0)
    rows: int
    bytes: int
    seconds: float
    #: columns whose values pyiceberg cannot bound: set their metrics mode to counts
    counts_only: list[str]
    attempts: int  #: how many attempts it took


# -- the types a relation decodes with, as JSON -------------------------------------------------


def types_to_json(rel: RelationVersion, types: Mapping[int, TypeInfo]) -> dict[str, Any]:
    """The pg_type facts ``rel``'s columns decode with (at its ``valid_from`` when ``types``
    keeps history, as the change stream reads them), with every type they depend on:
    ``{"<oid>": type_to_json(info)}``. Types the dictionary lacks are left out; building the
    codec then fails naming the column, as it would for the change stream."""
    at = LayoutCache(types).types_at(rel)
    out: dict[str, Any] = {}
    todo = [c.type_oid for c in rel.live_columns()]
    while todo:
        oid = todo.pop()
        if str(oid) in out:
            continue
        info = at.get(oid)
        if info is None:
            continue
        out[str(oid)] = type_to_json(info)
        todo.extend(info.dependencies())
    return out


def types_from_json(data: Mapping[str, Any]) -> dict[int, TypeInfo]:
    return {int(oid): type_from_json(d) for oid, d in data.items()}


# -- the copy -------------------------------------------------------------------------------


def copy_chunk(task: ChunkTask) -> ChunkResult:
    """Copy the chunk into ``task.location``; retried on read and write failures."""
    started = time.monotonic()
    converter = CopyRows(RelationVersion.from_json(task.relation),
                         types_from_json(task.types), Schema.model_validate_json(task.schema_json),
                         commit_lsn=task.commit_lsn, commit_ts_us=task.commit_ts_us,
                         table=task.table)
    io = load_file_io(task.io_properties, task.location)
    attempts = max(1, task.attempts)
    for attempt in range(1, attempts + 1):
        try:
            rows, counts_only = _copy_once(task, converter, io)
            size = len(io.new_input(task.location))
        except (psycopg.Error, OSError) as exc:
            _discard(io, task.location)
            if attempt < attempts:
                time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
                continue
            raise _final_error(task, exc, attempts) from (None if _leaks(task.dsn, exc)
                                                          else exc)
        except (LakeError, TupleDecodeError) as exc:  # the data itself: no retry helps
            _discard(io, task.location)
            raise type(exc)(f"{task.where()}: {exc}") from exc
        except BaseException:
            _discard(io, task.location)
            raise
        return ChunkResult(task.table, task.oid, task.index, task.location, rows, size,
                           time.monotonic() - started, sorted(counts_only), attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _copy_once(task: ChunkTask, converter: CopyRows, io: FileIO) -> tuple[int, set[str]]:
    counts_only: set[str] = set()
    total = 0
    statement = converter.copy_statement(task.first_block, task.end_block)
    with psycopg.connect(task.dsn, autocommit=False,
                         application_name=APPLICATION_NAME) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        with conn.cursor() as cur:
            # the first statement opens BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; the
            # snapshot must be set before any query of the transaction
            cur.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(
                sql.Literal(task.snapshot_id)))
            for setting in SESSION_SETTINGS:
                cur.execute(setting)
            # a writer that gets no rows still closes a valid file (schema, no row groups)
            with io.new_output(task.location).create(overwrite=True) as out, \
                    pq.ParquetWriter(out, converter.file_schema, compression=COMPRESSION,
                                     store_decimal_as_integer=True) as writer, \
                    cur.copy(statement) as copy:
                batch: list[tuple[Any, ...]] = []
                for row in copy.rows():
                    batch.append(row)
                    if len(batch) >= task.batch_rows:
                        total += _write(converter, batch, writer, counts_only)
                        batch = []
                if batch:
                    total += _write(converter, batch, writer, counts_only)
        conn.rollback()
    return total, counts_only


def _write(converter: CopyRows, rows: list[tuple[Any, ...]], writer: pq.ParquetWriter,
           counts_only: set[str]) -> int:
    bad = next((v for v in rows[0] if v is not None and not isinstance(v, str)), None)
    if bad is not None:
        raise LakeError(f"{converter.table}: COPY returned {type(bad).__name__} values where "
                        "text was expected")
    data = converter.to_arrow(rows)
    counts_only.update(counts_only_columns(data))
    writer.write_table(data)
    return data.num_rows


def _discard(io: FileIO, location: str) -> None:
    # never written, or the store is gone: the next attempt overwrites it anyway
    with contextlib.suppress(OSError):
        io.delete(location)


def _leaks(dsn: str, exc: BaseException) -> bool:
    password = _password(dsn)
    return password is not None and password in str(exc)


def _password(dsn: str) -> str | None:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return str(password) if password else None


def server_name(dsn: str) -> str:
    """The server a DSN names — user@host:port/dbname — without its password."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    user = str(info.get("user") or "")
    host = info.get("host") or info.get("hostaddr") or "localhost"
    port = info.get("port") or "5432"
    db = info.get("dbname") or user or "?"
    return f"{user + '@' if user else ''}{host}:{port}/{db}"


def _final_error(task: ChunkTask, exc: BaseException, attempts: int) -> Exception:
    cause = " ".join(str(exc).split()) or type(exc).__name__
    password = _password(task.dsn)
    if password:
        cause = cause.replace(password, "***")
    if isinstance(exc, psycopg.Error):
        return SourceError(f"{task.where()} failed after {attempts} attempt(s) reading from "
                           f"{server_name(task.dsn)}: {cause}")
    return LakeError(f"{task.where()} failed after {attempts} attempt(s) writing "
                     f"{task.location}: {cause}")
