"""Executor side of the initial snapshot: one chunk of a table -> one mirror data file.

The driver exports a snapshot (``pg_export_snapshot()``, its transaction held open) and plans
each table as chunks of heap blocks; a worker joins that snapshot (``SET TRANSACTION
SNAPSHOT``, as ``pg_dump -j`` does), so every chunk sees the same committed state, copies its
blocks with a TID range scan and streams the rows — converted by
:class:`cdclake.snapshot.copyrows.CopyRows` in batches of at most ``batch_rows`` — into ONE
Parquet file laid out as the mirror's schema with its field ids, ready for pyiceberg's
``parquet_file_to_data_file``. A chunk is never held in memory whole.

The rows come in COPY's binary format, read and decoded column by column by the compiled
loop over libpq (:mod:`cdclake.snapshot._copyout`, a batch of ``batch_rows`` rows at a time on
a thread, the GIL released) into the stream's values, or the text of a column's output
function, which CopyRows converts (:meth:`CopyRows.from_binary`). A value the binary decoder
cannot take sends the chunk, from scratch, to COPY's CSV output (also taken when the compiled
module was not built, then read through psycopg a row at a time, or with ``binary=False``):
parsed block by block (``csv_block_bytes``) by pyarrow's CSV parser into string columns, which
CopyRows converts with Arrow kernels where the codec's text maps exactly onto them (value by
value through the codec elsewhere). A row longer than a block (a huge TOASTed value) stops the
CSV parser: the chunk is then copied again from scratch, the same file overwritten, through
COPY's text format and psycopg's row parser — the general path, also taken with
``csv_block_bytes = 0``; the result's ``format`` says which one ran.

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
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg.conninfo import conninfo_to_dict
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.schema import Schema
from pyspark.accumulators import Accumulator, AccumulatorParam

from cdclake import native
from cdclake.catalog.connection import connect, pinned_options
from cdclake.catalog.model import RelationVersion, TypeInfo, type_from_json, type_to_json
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import LakeError, SourceError, TupleDecodeError
from cdclake.parquet import dictionary_columns
from cdclake.snapshot.copyrows import (
    OUTPUT_FUNCTIONS,
    SESSION_SETTINGS,
    CopyRows,
    counts_only_columns,
)

log = logging.getLogger(__name__)

__all__ = ["ChunkResult", "ChunkTask", "ChunkTotals", "copy_chunk", "counted_copy",
           "types_from_json", "types_to_json"]

#: seconds before the second attempt; doubled for each further one
RETRY_BACKOFF_S = 0.5
APPLICATION_NAME = "cdclake-snapshot"
#: pyiceberg's default data file codec (write.parquet.compression-codec); decimals are
#: stored as pyiceberg stores them too (int32/int64 up to 18 digits, as the Iceberg spec allows)
COMPRESSION = "zstd"
#: what pg_export_snapshot() returns: hex words and a number, joined by dashes
SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+")
#: bytes of COPY CSV output the parser takes at a time: a row must fit in one. pyarrow's
#: parser costs about the same per byte from 512 KiB to 4 MiB blocks, 1.2x at 8 MiB and 5x at
#: 16 MiB (300k rows of the bench's wide table: 0.21, 0.24 and 1.12 CPU-s)
CSV_BLOCK_BYTES = 4 << 20
#: bytes of COPY's binary output a batch holds at most (besides ``batch_rows``): a batch of
#: rows with large TOASTed values stays this size (two are held, one read, one written)
BINARY_BATCH_BYTES = 32 << 20
#: blocks the CSV reader's thread may read beyond the batches taken (:class:`_CopyStream`)
AHEAD_BLOCKS = 2
#: seconds a read waits for the caller to take a batch before it reads anyway
AHEAD_WAIT_S = 5.0

#: the compiled COPY reader (None: not built, or pure Python asked for — psycopg reads)
_copyout = native.compiled("cdclake.snapshot._copyout")
#: what a failed read raises: retried, then reported as a read from the source
READ_ERRORS: tuple[type[Exception], ...] = (psycopg.Error,) + (
    (_copyout.CopyOutError,) if _copyout is not None else ())
#: what a chunk's attempt is retried on: a read, or a write (OSError)
_RETRIED: tuple[type[Exception], ...] = (*READ_ERRORS, OSError)


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
    #: COPY's binary format where the relation allows it (CopyRows.binary_plan) and the
    #: compiled reader was built; False: CSV (or text) only
    binary: bool = True
    #: bytes of binary output a batch holds at most
    batch_bytes: int = BINARY_BATCH_BYTES

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
    #: the format the rows came in: "binary", "csv", or "text" (a row longer than a CSV
    #: block, or CSV turned off)
    format: str = "csv"


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
            rows, counts_only, fmt = _copy_once(task, converter, io)
            size = len(io.new_input(task.location))
        except _RETRIED as exc:
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
                           time.monotonic() - started, sorted(counts_only), attempt, fmt)
    raise AssertionError("unreachable")  # pragma: no cover


class _GiveWay(Exception):
    """The format a chunk is being copied in cannot carry it: the next one must."""


class _RowTooLong(_GiveWay):
    """A CSV row longer than the parser's block."""


def _formats(task: ChunkTask, converter: CopyRows) -> list[str]:
    """The formats a chunk is copied in, fastest first: each gives way to the next."""
    formats = []
    if task.binary and _copyout is not None and converter.binary_plan is not None \
            and task.csv_block_bytes > 0:
        formats.append("binary")
    if task.csv_block_bytes > 0:
        formats.append("csv")
    return [*formats, "text"]


def _copy_once(task: ChunkTask, converter: CopyRows,
               io: FileIO) -> tuple[int, set[str], str]:
    """(rows, counts-only columns, the format that ran) of one attempt."""
    *faster, last = _formats(task, converter)
    for fmt in faster:
        try:
            return (*_copy(task, converter, io, fmt), fmt)
        except _GiveWay:
            pass  # from scratch, the file overwritten: nothing of this attempt is kept
    return (*_copy(task, converter, io, last), last)


def _copy(task: ChunkTask, converter: CopyRows, io: FileIO,
          fmt: str) -> tuple[int, set[str]]:
    counts_only: set[str] = set()
    with io.new_output(task.location).create(overwrite=True) as out, \
            _DataFile(out, converter.file_schema) as writer:
        if fmt != "text" and _copyout is not None:
            total = _copy_compiled(task, converter, fmt, writer, counts_only)
        else:
            total = _copy_psycopg(task, converter, fmt, writer, counts_only)
    return total, counts_only


def _copy_compiled(task: ChunkTask, converter: CopyRows, fmt: str, writer: _DataFile,
                   counts_only: set[str]) -> int:
    """The chunk through the compiled reader's own session: binary, or CSV in blocks."""
    assert _copyout is not None
    with _copyout.CopyOut({"dbname": task.dsn, "application_name": APPLICATION_NAME,
                           "options": pinned_options(task.dsn)}) as session:
        for statement in _setup(task):
            session.execute(statement)
        if fmt == "csv":
            session.start(converter.copy_statement(task.first_block, task.end_block,
                                                   csv=True))
            return _read_csv(task, converter, session.read, writer, counts_only)
        oids = ",".join(map(str, converter.output_types()))
        outputs = {int(oid): (function, name) for oid, function, name in
                   session.execute(OUTPUT_FUNCTIONS.format(oids=oids))}
        session.start(converter.binary_statement(outputs, task.first_block, task.end_block))
        return _read_binary(task, converter, session, writer, counts_only)


def _copy_psycopg(task: ChunkTask, converter: CopyRows, fmt: str, writer: _DataFile,
                  counts_only: set[str]) -> int:
    """The chunk through psycopg: CSV a row at a time, or the text format."""
    statement = converter.copy_statement(task.first_block, task.end_block, csv=fmt == "csv")
    with connect(task.dsn, autocommit=True, application_name=APPLICATION_NAME) as conn, \
            conn.cursor() as cur:
        for setup in _setup(task):
            cur.execute(setup)
        with cur.copy(statement) as copy:
            total = (_read_csv(task, converter, copy.read, writer, counts_only)
                     if fmt == "csv" else
                     _read_text(task, converter, copy, writer, counts_only))
        cur.execute("ROLLBACK")
    return total


def _setup(task: ChunkTask) -> list[str]:
    """The statements a copying session runs before its COPY: the driver's snapshot joined
    (it must be set before any query of the transaction), then the codecs' settings."""
    if not SNAPSHOT_ID.fullmatch(task.snapshot_id):
        raise LakeError(f"{task.snapshot_id!r} is not an exported snapshot")
    return ["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
            f"SET TRANSACTION SNAPSHOT '{task.snapshot_id}'",
            *SESSION_SETTINGS]


def _read_binary(task: ChunkTask, converter: CopyRows, session: Any, writer: _DataFile,
                 counts_only: set[str]) -> int:
    """Batches of ``batch_rows`` rows (or ``batch_bytes``) read and decoded by the compiled
    reader on a thread (the GIL released) while the one before is converted and written: two
    batches held."""
    assert _copyout is not None and converter.binary_plan is not None
    kinds = []
    for lc, kind in zip(converter.selected, converter.binary_plan, strict=True):
        t = lc.codec.arrow_type
        p, s = (t.precision, t.scale) if kind == "numeric" else (0, 0)
        name = "text" if kind == "output" else kind
        kinds.append((int(getattr(_copyout.Kind, f"K_{name.upper()}")), p, s))
    step, size = max(1, task.batch_rows), max(1, task.batch_bytes)
    total = 0
    with ThreadPoolExecutor(1, thread_name_prefix="cdclake-copy") as reading:
        ahead = reading.submit(session.read_binary, kinds, step, size)
        while True:
            try:
                rows, columns, specials = ahead.result()
            except _copyout.NotPlain as exc:
                raise _GiveWay(f"column {exc.args[0] + 1}") from exc
            except _copyout.Malformed as exc:  # the text formats are read without this code
                log.warning("%s: %s; copying it as CSV", task.where(), exc)
                raise _GiveWay(str(exc)) from exc
            if not rows:
                return total
            ahead = reading.submit(session.read_binary, kinds, step, size)
            total += _write_table(converter.from_binary(rows, columns, specials), writer,
                                  counts_only)


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


def _read_csv(task: ChunkTask, converter: CopyRows, read: Callable[[], bytes],
              writer: _DataFile, counts_only: set[str]) -> int:
    total = 0
    step = max(1, task.batch_rows)
    with _CopyStream(read) as stream:
        if stream.empty():  # the CSV reader refuses an input without a byte
            return 0
        reader = _parsing(converter, lambda: converter.csv_reader(stream,
                                                                  task.csv_block_bytes))
        batches: Iterator[pa.RecordBatch] = iter(reader)
        pending: list[pa.Table] = []  # converted, written together: a row group of ~step rows
        held = 0
        while (batch := _parsing(converter, lambda: next(batches, None))) is not None:
            stream.took()
            for start in range(0, batch.num_rows, step):
                pending.append(converter.from_strings(batch.slice(start, step).columns))
                held += pending[-1].num_rows
                if held >= step:
                    total += _write_table(pa.concat_tables(pending), writer, counts_only)
                    pending, held = [], 0
        if pending:
            total += _write_table(pa.concat_tables(pending), writer, counts_only)
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
    """A read-only file over COPY TO's output, for pyarrow's CSV reader: ``read()`` gives
    the output's next bytes (psycopg's ``Copy.read``, a row at a time, or the compiled
    :class:`cdclake.snapshot._copyout.CopyOut`'s, a block at a time), ``b""`` at its end.

    The CSV reader calls :meth:`read` from a thread of its own, which reads ahead of the
    batches the caller takes as far as COPY outruns the conversion: 13 blocks of a 1.6M-row
    chunk's 19 at once (208 MiB), so a task's memory grew with its chunk. So a read waits
    while :data:`AHEAD_BLOCKS` blocks are read beyond the batches taken (:meth:`took`; a
    block parses into one batch) — for :data:`AHEAD_WAIT_S` at most, then reads anyway: a
    reader never waits for a batch it cannot produce. The counts have a lock of their own,
    reading another (so :meth:`took` never waits for a block being read): :meth:`close`
    waits for a read in flight and ends reading (EOF from then on, a waiting read woken) —
    only after it may the caller leave the COPY (which, after an error, is abandoned).
    """

    def __init__(self, read: Callable[[], bytes]) -> None:
        self._source = read
        self._counts = threading.Condition()
        self._reading = threading.Lock()
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
        read = self._source
        while len(buffer) < n and not self._eof:
            data = read()
            if data:
                buffer += data
            else:
                self._eof = True

    def empty(self) -> bool:
        """No byte at all (a chunk without rows)."""
        with self._reading:
            self._fill(1)
            return not self._buffer

    def took(self) -> None:
        """The caller took a batch from the CSV reader: a block more may be read."""
        with self._counts:
            self._taken += 1
            self._counts.notify_all()

    def read(self, n: int = -1) -> bytes | bytearray:
        """Exactly ``n`` bytes (fewer only at the end), once the reader is no more than
        :data:`AHEAD_BLOCKS` blocks ahead. The buffer handed out is never touched again
        (pyarrow may keep it without a copy)."""
        with self._counts:
            self._counts.wait_for(lambda: self._closed or
                                  self._handed - self._taken < AHEAD_BLOCKS, AHEAD_WAIT_S)
        with self._reading:
            if self._closed:
                return b""
            want = n if n >= 0 else 1 << 62
            self._fill(want)
            out = self._buffer
            if len(out) > want:  # the rest (less than a block) starts the next one
                self._buffer = out[want:]
                del out[want:]
            else:
                self._buffer = bytearray()
        if out:
            with self._counts:
                self._handed += 1
        return out

    def close(self) -> None:
        with self._counts:
            self._closed = True
            self._counts.notify_all()
        with self._reading:
            self._buffer = bytearray()

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
    if isinstance(exc, READ_ERRORS):
        return SourceError(f"{task.where()} failed after {attempts} attempt(s) reading from "
                           f"{server_name(task.dsn)}: {cause}")
    return LakeError(f"{task.where()} failed after {attempts} attempt(s) writing "
                     f"{task.location}: {cause}")


def counted_copy(totals: Accumulator) -> Callable[[ChunkTask], ChunkResult]:  # type: ignore[type-arg]
    """The snapshot's task body: :func:`copy_chunk`, its rows and the chunk added to
    ``totals`` (a :class:`ChunkTotals` accumulator: the driver's progress lines).

    Built here, not in the driver: Spark pickles what a task body uses by reference, and an
    executor's worker then imports this module only (the driver's imports cost every worker
    0.3 s more)."""
    def run(task: ChunkTask) -> ChunkResult:
        result = copy_chunk(task)
        totals.add({task.table: (result.rows, 1)})
        return result
    return run


class ChunkTotals(AccumulatorParam):  # type: ignore[type-arg]
    """table -> (rows, chunks) summed as tasks finish: the snapshot's progress."""

    def zero(self, value: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        return {}

    def addInPlace(self, a: dict[str, tuple[int, int]],
                   b: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for k, (rows, chunks) in b.items():
            r0, c0 = a.get(k, (0, 0))
            a[k] = (r0 + rows, c0 + chunks)
        return a
