"""The Arrow output plugin: committed changes as typed Arrow rows, one stream per table.

Layout and columns are the contract in :mod:`cdclake.decoding.stream`. The plugin has two
halves. :class:`ArrowRows` builds the rows (the output plugin callbacks) and buffers them per
relation version; whenever a buffer reaches ``rows_per_part`` rows or about ``bytes_per_part``
bytes of row data (the logged tuples and TOAST chunks it was built from) it hands the part, one
Arrow table, to a :class:`RowSink`, so memory stays bounded however large a batch is and however
wide its rows. Where parts go
is the sink's business: :class:`ParquetParts` writes them as Parquet files of a batch
directory (:class:`ArrowChanges`, the local ``decode`` path and Spark's writer), a Spark
partition keeps them for its task's result. A column whose TOASTed value was not logged
(UPDATE that did not touch it) is null and named in ``_unchanged_toast`` — never a placeholder.
A value without a typed representation (the codec raises NotTypeable) is null and its exact
text goes into ``_cdc_pg_text`` under its attnum: such values never stop a run. A value cdclake
cannot print at all (its type's output function is unknown to it: NoTextOutput) is null with
an entry that has no text: the lake then quarantines that table alone (docs/lake.md).

The callbacks that build rows (``change``, ``rewrite``, ``truncate``, and the buffer's making
and flushing) run once per change, so they are written once and compiled as themselves
(Cython's pure-Python mode, ``_arrow.pxd``): they are :class:`ArrowRows`'s methods in both
builds (``cdclake.native``). Compiled, a buffer's int2, int4, int8, float8 and UTF-8 text
columns and most system columns are ``_columns.pyx``'s Columns, Arrow's buffers filled in
place, into which a well-formed datum of the commonest codecs is copied without a Python
value; anything else goes to the codec, which gives the value or says what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import pyarrow as pa
from pyarrow import fs as pafs

from cdclake import native, parquet
from cdclake.catalog.model import (
    IDENTITY_FULL,
    IDENTITY_NOTHING,
    RELKIND_PARTITIONED,
    RelationVersion,
    TypeInfo,
)
from cdclake.catalog.types import enum_labels
from cdclake.decoding import stream
from cdclake.decoding.changes import DELETE, INSERT, Change, TxnInfo
from cdclake.decoding.rows import (
    UNCHANGED_TOAST,
    LayoutCache,
    LiveColumn,
    RowLayout,
    column_payload,
    exact_text,
)
from cdclake.tuples.desc import MissingValue
from cdclake.tuples.untypeable import NotTypeable
from cdclake.wal.record import WalTuple

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake._identity import id
    from cython.cimports.cdclake.decoding.plugins._columns import (
        drop_rows,
        new_column,
        put_datum,
        put_int,
        put_null,
        put_str,
        to_array,
        value_kind,
    )
    from cython.cimports.cdclake.tuples._bytes import plain_payload
    from cython.cimports.cdclake.wal._slots import field_of, offset
else:
    from cdclake.wal.primitives import field_of

    # the Python build's columns are lists of Python values, which the flush converts

    def value_kind(codec: Any) -> int:
        """Python types every datum with its codec."""
        return 0

    def new_column(field: pa.Field, kind: int, system: bool) -> list[Any]:
        return []

    def to_array(column: list[Any], arrow_type: pa.DataType) -> pa.Array:
        return pa.array(column, type=arrow_type)

    def put_datum(column: list[Any], kind: int, v: bytes) -> bool:
        return False

    def put_null(column: list[Any]) -> None:
        column.append(None)

    def put_int(column: list[Any], v: int) -> None:
        column.append(v)

    def put_str(column: list[Any], v: str) -> None:
        column.append(v)

    def drop_rows(column: list[Any], n: int) -> None:
        del column[n:]

    def plain_payload(value: object) -> object:
        return None

if cython.compiled:  # where a Change, its WalTuples and a TxnInfo hold their fields
    C_LSN = offset(Change, "lsn")
    C_SEQ = offset(Change, "seq")
    C_OLD = offset(Change, "old")
    C_NEW = offset(Change, "new")
    T_DATA = offset(WalTuple, "data")
    I_XID = offset(TxnInfo, "xid")
    I_FINAL_LSN = offset(TxnInfo, "final_lsn")
    I_COMMIT_TIME = offset(TxnInfo, "commit_time")
else:  # read by name
    C_LSN = C_SEQ = C_OLD = C_NEW = T_DATA = I_XID = I_FINAL_LSN = I_COMMIT_TIME = 0

OP_INSERT, OP_UPDATE, OP_DELETE = stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE
OP_TRUNCATE, OP_REWRITE_BEGIN = stream.OP_TRUNCATE, stream.OP_REWRITE_BEGIN
OP_REWRITE, PG_EPOCH_US, PG_TEXT = stream.OP_REWRITE, stream.PG_EPOCH_US, stream.PG_TEXT


def version_dir(rel: RelationVersion) -> str:
    return f"{rel.schema}.{rel.name}/v{rel.valid_from:016X}"


class Step:
    """A live column's plan, made once per relation version: where it is in the deformed
    tuple, whether it is a varlena, which of ``_columns.pyx``'s kinds its values are (0: the
    codec makes them), the LiveColumn, its codec, name and attnum (as ``_cdc_pg_text`` keys
    it)."""

    __slots__ = ("attnum", "codec", "column", "index", "kind", "name", "varlena")

    def __init__(self, lc: LiveColumn) -> None:
        self.index = lc.index
        self.varlena = lc.codec.typisvarlena
        self.kind = value_kind(lc.codec)
        self.column = lc
        self.codec = lc.codec
        self.name = lc.column.name
        self.attnum = str(lc.column.attnum)


class TableBuffer:
    """A relation version's rows not yet handed to the sink, column by column."""

    __slots__ = ("columns", "key", "layout", "parts", "paths", "pending_bytes", "rel", "rows",
                 "schema", "steps")

    def __init__(self, rel: RelationVersion, layout: RowLayout, key: tuple[LiveColumn, ...],
                 schema: pa.Schema) -> None:
        self.rel = rel
        self.layout = layout
        self.key = key
        self.schema = schema
        self.steps = [Step(lc) for lc in layout.live]
        self.columns = new_columns(self.steps, schema)
        self.parts = 0
        self.rows = 0
        self.pending_bytes = 0  #: row data in ``columns``, estimated from the tuples logged
        self.paths: list[str] = []


class RowSink(Protocol):
    """Where full row buffers go."""

    def part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        """Keep part ``index`` of a relation version's rows; returns the part's name."""
        ...


class ParquetParts:
    """A sink writing each part as a Parquet file under ``root`` (a batch directory)."""

    def __init__(self, filesystem: pafs.FileSystem, root: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")

    def part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        return write_part(self.fs, self.root, rel, index, table)


def new_columns(steps: list[Step], schema: pa.Schema) -> list[Any]:
    """A buffer's empty columns, one per field of ``schema`` (the steps' columns, then the
    system columns)."""
    live = len(steps)
    return [new_column(f, steps[i].kind if i < live else 0, i >= live)
            for i, f in enumerate(schema)]


def buffer_of(self: ArrowRows, rel: RelationVersion) -> TableBuffer:
    """``rel``'s buffer, made at its first row (kept by the version's identity)."""
    buf = self._buffers.get(id(rel))
    if buf is not None and buf.rel is rel:
        return buf
    layout = self.layouts.get(rel)
    key = key_columns(rel, layout)
    fields = column_fields(layout, self.layouts.types_at(rel))
    old_key_type = stream.old_key_type(
        [pa.field(lc.column.name, lc.codec.arrow_type) for lc in key])
    buf = TableBuffer(rel, layout, key, pa.schema(fields + stream.system_fields(old_key_type)))
    self._buffers[id(rel)] = buf
    self._order.append(buf)
    return buf


def put_values(cols: list[Any], steps: list[Step], layout: RowLayout, tup: WalTuple, lsn: int,
               toast: Mapping[int, list[bytes]], unchanged: list[str]
               ) -> dict[str, str | None] | None:
    """Append the tuple's typed values to ``cols`` (a row's first columns); returns attnum ->
    text of those without a typed value (None when there are none, the usual case: no dict is
    built then)."""
    datums = layout.datums(tup, lsn)
    texts: dict[str, str | None] | None = None
    i = 0
    for step in steps:
        c = cols[i]
        i += 1
        d = datums[step.index]
        if d is None:
            put_null(c)
            continue
        v: Any = d
        if step.varlena:
            v = plain_payload(d)
            if v is None:
                v = column_payload(step.column, d, toast)
                if v is UNCHANGED_TOAST:
                    unchanged.append(step.name)
                    put_null(c)
                    continue
        if step.kind and type(v) is bytes and put_datum(c, step.kind, v):
            continue
        try:
            if type(v) is MissingValue:
                x = step.codec.value_from_text(v.text)
            else:
                x = step.codec.value(v)
        except NotTypeable:
            x = None
            if texts is None:
                texts = {}
            texts[step.attnum] = exact_text(step.column, v)
        c.append(x)
    return texts


def old_identity(buf: TableBuffer, old: WalTuple, lsn: int) -> dict[str, Any]:
    """The ``_old_key`` of a change that logged its old identity: the key columns' values by
    name, and the texts of those without a typed value (``_cdc_pg_text``) when there are."""
    cols: list[Any] = [[] for _ in buf.steps]
    old_texts = put_values(cols, buf.steps, buf.layout, old, lsn, {}, [])
    by_attnum = {step.column.column.attnum: c[0] for step, c in zip(buf.steps, cols,
                                                                     strict=True)}
    old_key: dict[str, Any] = {lc.column.name: by_attnum[lc.column.attnum] for lc in buf.key}
    if old_texts is not None:
        keys = {str(lc.column.attnum) for lc in buf.key}
        old_key[PG_TEXT] = {a: t for a, t in old_texts.items() if a in keys} or None
    return old_key


def put_row(self: ArrowRows, buf: TableBuffer, txn: TxnInfo, lsn: int, seq: int, op: str,
            new: WalTuple | None, old: WalTuple | None, toast: Mapping[int, list[bytes]]
            ) -> None:
    """Append a row: its values (null without a new tuple), its old identity and the system
    columns; a value that raises takes the row out of every column again. A buffer that
    reaches ``rows_per_part`` rows or ``bytes_per_part`` bytes goes to the sink."""
    cols = buf.columns
    n = len(buf.steps)
    rows = len(cols[0])
    unchanged: list[str] = []
    texts = None
    old_key = None
    size = _toast_bytes(toast)
    try:
        if new is not None:
            texts = put_values(cols, buf.steps, buf.layout, new, lsn, toast, unchanged)
            size += len(field_of(new, WalTuple, T_DATA, "data"))
        else:
            for i in range(n):
                put_null(cols[i])
        if old is not None:
            size += len(field_of(old, WalTuple, T_DATA, "data"))
            if buf.key:
                old_key = old_identity(buf, old, lsn)
                if new is None:  # a DELETE's tuple is its old identity
                    texts = old_key.get(PG_TEXT)
        put_int(cols[n], field_of(txn, TxnInfo, I_FINAL_LSN, "final_lsn"))
        put_int(cols[n + 1], field_of(txn, TxnInfo, I_COMMIT_TIME, "commit_time") + PG_EPOCH_US)
        put_int(cols[n + 2], field_of(txn, TxnInfo, I_XID, "xid"))
        put_int(cols[n + 3], lsn)
        put_int(cols[n + 4], seq)
        put_str(cols[n + 5], op)
        cols[n + 6].append(old_key)
        cols[n + 7].append(unchanged or None)
        cols[n + 8].append(texts)
    except BaseException:
        for c in cols:
            drop_rows(c, rows)
        raise
    buf.rows += 1
    buf.pending_bytes += size
    if rows + 1 >= self.rows_per_part or buf.pending_bytes >= self.bytes_per_part:
        flush(self, buf)


def flush(self: ArrowRows, buf: TableBuffer) -> None:
    """Hand the buffer's rows to the sink as one Arrow table, and start its columns again."""
    if not len(buf.columns[0]):
        return
    arrays = [to_array(col, f.type) for col, f in zip(buf.columns, buf.schema, strict=True)]
    table = pa.Table.from_arrays(arrays, schema=buf.schema)
    buf.paths.append(self.sink.part(buf.rel, buf.parts, table))
    buf.parts += 1
    buf.columns = new_columns(buf.steps, buf.schema)
    buf.pending_bytes = 0


# -- output plugin callbacks (ArrowRows's) ----------------------------------------------------

def change(self: ArrowRows, txn: TxnInfo, rel: RelationVersion, action: int, chg: Change,
           toast: Mapping[int, list[bytes]]) -> None:
    op = OP_INSERT if action == INSERT else OP_DELETE if action == DELETE else OP_UPDATE
    put_row(self, buffer_of(self, rel), txn, field_of(chg, Change, C_LSN, "lsn"),
            field_of(chg, Change, C_SEQ, "seq"), op, field_of(chg, Change, C_NEW, "new"),
            field_of(chg, Change, C_OLD, "old"), toast)


def rewrite(self: ArrowRows, txn: TxnInfo, rel: RelationVersion, chg: Change,
            toast: Mapping[int, list[bytes]], first: bool) -> None:
    """A row of a table rewrite; its first row is preceded by the ``W`` marker."""
    buf = buffer_of(self, rel)
    if first:
        put_row(self, buf, txn, chg.lsn, -1, OP_REWRITE_BEGIN, None, None, {})
    assert chg.new is not None
    put_row(self, buf, txn, chg.lsn, chg.seq, OP_REWRITE, chg.new, None, toast)


def truncate(self: ArrowRows, txn: TxnInfo, rels: list[RelationVersion], chg: Change) -> None:
    for rel in rels:
        if rel.relkind == RELKIND_PARTITIONED:
            continue  # no rows, no mirror: its partitions' are truncated beside it
        put_row(self, buffer_of(self, rel), txn, chg.lsn, chg.seq, OP_TRUNCATE, None, None, {})


class ArrowRows:
    """The row builder: the output plugin callbacks, typed rows per relation version."""

    def __init__(self, types: Mapping[int, TypeInfo], sink: RowSink, *,
                 rows_per_part: int = stream.ROWS_PER_PART,
                 bytes_per_part: int = stream.BYTES_PER_PART) -> None:
        self.sink = sink
        self.layouts = LayoutCache(types)
        self.rows_per_part = rows_per_part
        self.bytes_per_part = bytes_per_part
        self._buffers: dict[int, TableBuffer] = {}  # id(RelationVersion) -> buffer
        self._order: list[TableBuffer] = []
        self.commits = 0
        self.first_lsn: int | None = None
        self.last_lsn = 0

    # -- output plugin callbacks -----------------------------------------------------------

    def begin(self, txn: TxnInfo) -> None:
        pass

    def commit(self, txn: TxnInfo) -> None:
        self.commits += 1
        if self.first_lsn is None:
            self.first_lsn = txn.final_lsn
        self.last_lsn = txn.final_lsn

    def message(self, txn: TxnInfo | None, lsn: int, transactional: bool, prefix: str,
                content: bytes) -> None:
        pass  # messages are not table changes; DDL messages already shaped the dictionary

    # the module's functions (compiled, where built: bound below)
    change = change
    rewrite = rewrite
    truncate = truncate
    _buffer = buffer_of
    _flush = flush

    # -- end of batch ----------------------------------------------------------------------

    def finish(self) -> list[tuple[RelationVersion, list[str], int]]:
        """Hand every partial buffer to the sink; each relation version's part names and row
        count, in the order of their first rows (the manifest's order)."""
        for buf in self._order:
            self._flush(buf)
        return [(buf.rel, buf.paths, buf.rows) for buf in self._order]


class ArrowChanges(ArrowRows):
    """The plugin writing one batch: Parquet parts under ``root``, the manifest at close."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, batch: str,
                 types: Mapping[int, TypeInfo], *, rows_per_part: int = stream.ROWS_PER_PART,
                 bytes_per_part: int = stream.BYTES_PER_PART) -> None:
        self.parts = ParquetParts(filesystem, root)
        self.batch = batch
        super().__init__(types, self.parts, rows_per_part=rows_per_part,
                         bytes_per_part=bytes_per_part)

    def close(self, start_lsn: int, end_lsn: int) -> dict[str, Any]:
        """Flush every buffer and write ``_manifest.json``; returns the manifest."""
        manifest = build_manifest(self.batch, start_lsn, end_lsn, self.commits, self.finish())
        write_manifest(self.parts.fs, self.parts.root, manifest)
        return manifest


def _toast_bytes(toast: Mapping[int, list[bytes]]) -> int:
    """The bytes of the TOAST chunks a change's values are reassembled from."""
    return sum(len(c) for chunks in toast.values() for c in chunks) if toast else 0


def column_fields(layout: RowLayout, types: Mapping[int, TypeInfo]) -> list[pa.Field]:
    """A relation version's data columns as the change stream types them (an enum column's
    field names its labels): also the type mapping of the initial snapshot's copy."""
    return [pa.field(lc.column.name, lc.codec.arrow_type,
                     metadata=stream.enum_metadata(enum_labels(lc.column.type_oid, types)))
            for lc in layout.live]


def part_path(rel: RelationVersion, index: int) -> str:
    """Part ``index`` of a relation version, relative to the batch root."""
    return f"{version_dir(rel)}/part-{index:05d}.parquet"


def write_part(fs: pafs.FileSystem, root: str, rel: RelationVersion, index: int,
               table: pa.Table) -> str:
    """Write one Parquet part of a relation version; its path relative to the batch root.

    The Spark writer names its parts with :func:`part_path` too, so both produce the same
    files for the same rows.
    """
    rel_path = part_path(rel, index)
    path = f"{root}/{rel_path}"
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        parquet.write_table(table, out)
    return rel_path


def build_manifest(batch: str, start_lsn: int, end_lsn: int, commits: int,
                   versions: list[tuple[RelationVersion, list[str], int]]) -> dict[str, Any]:
    """The ``_manifest.json`` content; ``versions`` (relation, paths, rows) in first-row order."""
    tables: dict[int, dict[str, Any]] = {}
    for rel, paths, rows in versions:
        entry = tables.setdefault(rel.oid, {
            "table": f"{rel.schema}.{rel.name}", "oid": rel.oid, "versions": []})
        entry["versions"].append({"valid_from": rel.valid_from, "relation": rel.to_json(),
                                  "paths": paths, "rows": rows})
    return {"batch": batch, "start_lsn": start_lsn, "end_lsn": end_lsn, "commits": commits,
            "tables": list(tables.values())}


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """``_manifest.json``'s content, as every decoder writes it."""
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def write_manifest(fs: pafs.FileSystem, root: str, manifest: dict[str, Any]) -> None:
    """Write ``_manifest.json`` last: a batch without it is incomplete (lake.batch refuses it)."""
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(f"{root}/_manifest.json") as out:
        out.write(manifest_bytes(manifest))


def key_columns(rel: RelationVersion, layout: RowLayout) -> tuple[LiveColumn, ...]:
    """The old identity's columns: all for FULL, the key for DEFAULT/INDEX, none for NOTHING."""
    if rel.replident == IDENTITY_FULL:
        return layout.live
    if rel.replident == IDENTITY_NOTHING:
        return ()
    keys = set(rel.key_attnums)
    return tuple(lc for lc in layout.live if lc.column.attnum in keys)


if not cython.compiled:  # the compiled copy of this module binds nothing
    for _name, _method in (("change", change), ("rewrite", rewrite), ("truncate", truncate),
                           ("_buffer", buffer_of), ("_flush", flush)):
        native.bind(ArrowRows, _name, _method, "cdclake.decoding.plugins._arrow")
