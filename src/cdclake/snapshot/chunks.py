"""Executor side of the initial snapshot: one chunk of a table -> one mirror data file.

The driver exports a snapshot (``pg_export_snapshot()``, its transaction held open) and plans
each table as chunks of heap blocks; a worker joins that snapshot (``SET TRANSACTION
SNAPSHOT``, as ``pg_dump -j`` does), so every chunk sees the same committed state, copies its
blocks with a TID range scan and streams the rows — converted by
:class:`cdclake.lake.copyrows.CopyRows` in batches of at most ``batch_rows`` — into ONE
Parquet file laid out as the mirror's schema with its field ids, ready for pyiceberg's
``parquet_file_to_data_file``. A chunk is never held in memory whole.

The rows come as COPY's CSV output, read block by block (``csv_block_bytes``) by pyarrow's CSV
parser into string columns, which CopyRows converts with Arrow kernels where the codec's text
maps exactly onto them (value by value through the codec elsewhere). A row longer than a block
(a huge TOASTed value) stops the CSV parser: the chunk is then copied again from scratch, the
same file overwritten, through COPY's text format and psycopg's row parser — the general path,
also taken with ``csv_block_bytes = 0``; the result's ``text_path`` says which one ran.

An empty chunk still writes a valid Parquet file with zero rows, so every task has exactly one
file and the driver's bookkeeping is uniform (an empty table's mirror gets one empty file, and
so a committed snapshot).

A failure to read (psycopg.Error) or write (OSError) is retried ``attempts`` times with a
short backoff; the partial file is deleted each time. The last failure raises one line naming
the table, the chunk and its block range, and the cause — with the server's address but never
the DSN's password. Everything a task carries is plain data, so Spark can pickle it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.schema import Schema

from cdclake.catalog.connection import connect
from cdclake.catalog.model import RelationVersion, TypeInfo, type_from_json, type_to_json
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import LakeError, SourceError, TupleDecodeError
from cdclake.lake.copyrows import SESSION_SETTINGS, CopyRows, counts_only_columns
from cdclake.parquet import dictionary_columns

__all__ = ["ChunkResult", "ChunkTask", "copy_chunk", "types_from_json", "types_to_json"]

#: seconds before the second attempt; doubled for each further one
RETRY_BACKOFF_S = 0.5
APPLICATION_NAME = "cdclake-snapshot"
#: pyiceberg's default data file codec (write.parquet.compression-codec); decimals are
#: stored as pyiceberg stores them too (int32/int64 up to 18 digits, as the Iceberg spec allows)
COMPRESSION = "zstd"
#: bytes of COPY CSV output the parser takes at a time: a row must fit in one
CSV_BLOCK_BYTES = 16 << 20
#: blocks the CSV reader's thread may read beyond the batches taken (:class:`_CopyStream`)
AHEAD_BLOCKS = 2
#: seconds a read waits for the caller to take a batch before it reads anyway
AHEAD_WAIT_S = 5.0


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
    #: CSV parser block (a longer row sends the chunk down the text path); 0: text path only
    csv_block_bytes: int = CSV_BLOCK_BYTES

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
    #: copied through COPY's text format: a row longer than a CSV block, or CSV turned off
    text_path: bool = False


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
            rows, counts_only, text_path = _copy_once(task, converter, io)
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
                           time.monotonic() - started, sorted(counts_only), attempt,
                           text_path)
    raise AssertionError("unreachable")  # pragma: no cover


class _RowTooLong(Exception):
    """A CSV row longer than the parser's block: the chunk must take the text path."""


def _copy_once(task: ChunkTask, converter: CopyRows,
               io: FileIO) -> tuple[int, set[str], bool]:
    """(rows, counts-only columns, whether the text path ran) of one attempt."""
    if task.csv_block_bytes > 0:
        try:
            return (*_copy(task, converter, io, csv=True), False)
        except _RowTooLong:
            pass  # from scratch, the file overwritten: nothing of the CSV attempt is kept
    return (*_copy(task, converter, io, csv=False), True)


def _copy(task: ChunkTask, converter: CopyRows, io: FileIO, *,
          csv: bool) -> tuple[int, set[str]]:
    counts_only: set[str] = set()
    total = 0
    statement = converter.copy_statement(task.first_block, task.end_block, csv=csv)
    with connect(task.dsn, autocommit=False,
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
            with io.new_output(task.location).create(overwrite=True) as out, \
                    _DataFile(out, converter.file_schema) as writer, \
                    cur.copy(statement) as copy:
                if csv:
                    total = _read_csv(task, converter, copy, writer, counts_only)
                else:
                    total = _read_text(task, converter, copy, writer, counts_only)
        conn.rollback()
    return total, counts_only


def _read_text(task: ChunkTask, converter: CopyRows, copy: psycopg.Copy,
               writer: _DataFile, counts_only: set[str]) -> int:
    total = 0
    batch: list[tuple[Any, ...]] = []
    for row in copy.rows():
        batch.append(row)
        if len(batch) >= task.batch_rows:
            total += _write_rows(converter, batch, writer, counts_only)
            batch = []
    if batch:
        total += _write_rows(converter, batch, writer, counts_only)
    return total


def _read_csv(task: ChunkTask, converter: CopyRows, copy: psycopg.Copy,
              writer: _DataFile, counts_only: set[str]) -> int:
    total = 0
    step = max(1, task.batch_rows)
    with _CopyStream(copy) as stream:
        if stream.empty():  # the CSV reader refuses an input without a byte
            return 0
        reader = _parsing(converter, lambda: converter.csv_reader(stream,
                                                                  task.csv_block_bytes))
        batches: Iterator[pa.RecordBatch] = iter(reader)
        while (batch := _parsing(converter, lambda: next(batches, None))) is not None:
            stream.took()
            for start in range(0, batch.num_rows, step):
                data = converter.from_strings(batch.slice(start, step).columns)
                total += _write_table(data, writer, counts_only)
    return total


def _parsing(converter: CopyRows, fn: Callable[[], Any]) -> Any:
    """``fn()`` of the CSV reader: a row longer than its block -> _RowTooLong, any other
    parse failure -> one LakeError (PostgreSQL's CSV output is not what it was taken for).
    A read failure (psycopg.Error) comes through as itself, for the retry."""
    try:
        return fn()
    except pa.ArrowInvalid as exc:
        if "straddling" in str(exc):
            raise _RowTooLong(str(exc)) from exc
        raise LakeError(f"{converter.table}: COPY CSV output does not parse: "
                        f"{' '.join(str(exc).split())}") from exc


class _CopyStream:
    """A read-only file over COPY TO's data messages (one per row), for pyarrow's CSV reader.

    The CSV reader calls ``read`` from a thread of its own, which reads ahead of the batches
    the caller takes as far as COPY outruns the conversion: 13 blocks of a 1.6M-row chunk's
    19 at once (208 MiB), so a task's memory grew with its chunk. So a read waits while
    :data:`AHEAD_BLOCKS` blocks are read beyond the batches taken (:meth:`took`; a block
    parses into one batch) — for :data:`AHEAD_WAIT_S` at most, then reads anyway: a reader
    never waits for a batch it cannot produce. Reads hold a lock, and :meth:`close` waits for
    a read in flight and ends reading (EOF from then on, a waiting read woken): only after it
    may the caller's thread leave the copy block (which, after an error, cancels and drains
    the COPY).
    """

    def __init__(self, copy: psycopg.Copy) -> None:
        self._copy = copy
        self._lock = threading.Condition()
        # bytes read, not yet handed out; a bytearray: keeping psycopg's buffers (one per
        # row, allocated by libpq) until a block is full costs several times the read itself
        self._buffer = bytearray()
        self._eof = False
        self._closed = False
        self._handed = 0  # blocks read out
        self._taken = 0  # batches the caller took

    @property
    def closed(self) -> bool:
        return self._closed

    def readable(self) -> bool:
        return True

    def _fill(self, n: int) -> None:
        buffer = self._buffer
        read = self._copy.read
        while len(buffer) < n and not self._eof:
            data = read()
            if data:
                buffer += data
            else:
                self._eof = True

    def empty(self) -> bool:
        """No byte at all (a chunk without rows)."""
        with self._lock:
            self._fill(1)
            return not self._buffer

    def took(self) -> None:
        """The caller took a batch from the CSV reader: a block more may be read."""
        with self._lock:
            self._taken += 1
            self._lock.notify_all()

    def read(self, n: int = -1) -> bytes | bytearray:
        """Exactly ``n`` bytes (fewer only at the end), once the reader is no more than
        :data:`AHEAD_BLOCKS` blocks ahead. The buffer handed out is never touched again
        (pyarrow may keep it without a copy)."""
        with self._lock:
            self._lock.wait_for(lambda: self._closed or
                                self._handed - self._taken < AHEAD_BLOCKS, AHEAD_WAIT_S)
            if self._closed:
                return b""
            want = n if n >= 0 else 1 << 62
            self._fill(want)
            out = self._buffer
            if len(out) > want:  # the rest (less than a row) starts the next block
                self._buffer = out[want:]
                del out[want:]
            else:
                self._buffer = bytearray()
            self._handed += bool(out)
            return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._buffer = bytearray()
            self._lock.notify_all()

    def __enter__(self) -> _CopyStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _DataFile:
    """The chunk's Parquet file, its writer opened at the first rows: their repetitive
    columns are the ones dictionary-encoded (:func:`cdclake.parquet.dictionary_columns`)."""

    def __init__(self, out: Any, schema: pa.Schema) -> None:
        self.out = out
        self.schema = schema
        self._writer: pq.ParquetWriter | None = None

    def _open(self, use_dictionary: list[str]) -> pq.ParquetWriter:
        self._writer = pq.ParquetWriter(self.out, self.schema, compression=COMPRESSION,
                                        store_decimal_as_integer=True,
                                        use_dictionary=use_dictionary)
        return self._writer

    def write_table(self, data: pa.Table) -> None:
        (self._writer or self._open(dictionary_columns(data))).write_table(data)

    def __enter__(self) -> _DataFile:
        return self

    def __exit__(self, *exc: object) -> None:
        # a writer that got no rows still closes a valid file (schema, no row groups)
        (self._writer or self._open([])).close()


def _write_rows(converter: CopyRows, rows: list[tuple[Any, ...]], writer: _DataFile,
                counts_only: set[str]) -> int:
    bad = next((v for v in rows[0] if v is not None and not isinstance(v, str)), None)
    if bad is not None:
        raise LakeError(f"{converter.table}: COPY returned {type(bad).__name__} values where "
                        "text was expected")
    return _write_table(converter.to_arrow(rows), writer, counts_only)


def _write_table(data: pa.Table, writer: _DataFile, counts_only: set[str]) -> int:
    if not data.num_rows:
        return 0
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
