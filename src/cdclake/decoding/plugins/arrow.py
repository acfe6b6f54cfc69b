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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
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
from cdclake.tuples.heap import MissingValue
from cdclake.tuples.untypeable import NotTypeable
from cdclake.wal.record import WalTuple


def version_dir(rel: RelationVersion) -> str:
    return f"{rel.schema}.{rel.name}/v{rel.valid_from:016X}"


@dataclass(slots=True)
class _TableBuffer:
    rel: RelationVersion
    layout: RowLayout
    key: tuple[LiveColumn, ...]
    schema: pa.Schema
    columns: list[list[Any]]
    parts: int = 0
    rows: int = 0
    pending_bytes: int = 0  #: row data in ``columns``, estimated from the tuples logged
    paths: list[str] = field(default_factory=list)


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


class ArrowRows:
    """The row builder: the output plugin callbacks, typed rows per relation version."""

    def __init__(self, types: Mapping[int, TypeInfo], sink: RowSink, *,
                 rows_per_part: int = stream.ROWS_PER_PART,
                 bytes_per_part: int = stream.BYTES_PER_PART) -> None:
        self.sink = sink
        self.layouts = LayoutCache(types)
        self.rows_per_part = rows_per_part
        self.bytes_per_part = bytes_per_part
        self._buffers: dict[int, _TableBuffer] = {}  # id(RelationVersion) -> buffer
        self._order: list[_TableBuffer] = []
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

    def change(self, txn: TxnInfo, rel: RelationVersion, action: int, change: Change,
               toast: Mapping[int, list[bytes]]) -> None:
        buf = self._buffer(rel)
        unchanged: list[str] = []
        texts: dict[str, str] | None = None
        if change.new is not None:
            values, texts = self._values(buf.layout, change.new, change.lsn, toast, unchanged)
        else:
            values = [None] * len(buf.layout.live)
        old_key = None
        if change.old is not None and buf.key:
            old_vals, old_texts = self._values(buf.layout, change.old, change.lsn, {}, [])
            by_attnum = {lc.column.attnum: v for lc, v in zip(buf.layout.live, old_vals,
                                                               strict=True)}
            old_key = {lc.column.name: by_attnum[lc.column.attnum] for lc in buf.key}
            if old_texts is not None:
                keys = {str(lc.column.attnum) for lc in buf.key}
                old_texts = {a: t for a, t in old_texts.items() if a in keys} or None
                old_key[stream.PG_TEXT] = old_texts
                if change.new is None:
                    texts = old_texts  # a DELETE's tuple is its old identity
        op = (stream.OP_INSERT if action == INSERT else
              stream.OP_DELETE if action == DELETE else stream.OP_UPDATE)
        size = _toast_bytes(toast)
        if change.new is not None:
            size += len(change.new.data)
        if change.old is not None:
            size += len(change.old.data)
        self._append(buf, txn, change.lsn, change.seq, op, values, old_key, unchanged or None,
                     texts, size)

    def rewrite(self, txn: TxnInfo, rel: RelationVersion, change: Change,
                toast: Mapping[int, list[bytes]], first: bool) -> None:
        """A row of a table rewrite; its first row is preceded by the ``W`` marker."""
        buf = self._buffer(rel)
        if first:
            self._append(buf, txn, change.lsn, -1, stream.OP_REWRITE_BEGIN,
                         [None] * len(buf.layout.live), None, None, None, 0)
        assert change.new is not None
        unchanged: list[str] = []
        values, texts = self._values(buf.layout, change.new, change.lsn, toast, unchanged)
        self._append(buf, txn, change.lsn, change.seq, stream.OP_REWRITE, values, None,
                     unchanged or None, texts, len(change.new.data) + _toast_bytes(toast))

    def truncate(self, txn: TxnInfo, rels: list[RelationVersion], change: Change) -> None:
        for rel in rels:
            if rel.relkind == RELKIND_PARTITIONED:
                continue  # no rows, no mirror: its partitions' are truncated beside it
            buf = self._buffer(rel)
            self._append(buf, txn, change.lsn, change.seq, stream.OP_TRUNCATE,
                         [None] * len(buf.layout.live), None, None, None, 0)

    # -- rows ------------------------------------------------------------------------------

    @staticmethod
    def _values(layout: RowLayout, tup: WalTuple, lsn: int, toast: Mapping[int, list[bytes]],
                unchanged: list[str]) -> tuple[list[Any], dict[str, str] | None]:
        """The tuple's typed values, and attnum -> text of those without a typed value (None
        when there are none, the usual case: no dict is built then)."""
        datums = layout.datums(tup, lsn)
        out: list[Any] = []
        texts: dict[str, str] | None = None
        for lc in layout.live:
            d = datums[lc.index]
            if d is None:
                out.append(None)
                continue
            v = column_payload(lc, d, toast)
            if v is UNCHANGED_TOAST:
                unchanged.append(lc.column.name)
                out.append(None)
                continue
            try:
                if isinstance(v, MissingValue):
                    out.append(lc.codec.value_from_text(v.text))
                else:
                    out.append(lc.codec.value(v))  # type: ignore[arg-type]
            except NotTypeable:
                out.append(None)
                if texts is None:
                    texts = {}
                texts[str(lc.column.attnum)] = exact_text(lc, v)
        return out, texts

    def _buffer(self, rel: RelationVersion) -> _TableBuffer:
        buf = self._buffers.get(id(rel))
        if buf is not None and buf.rel is rel:
            return buf
        layout = self.layouts.get(rel)
        key = key_columns(rel, layout)
        types = self.layouts.types_at(rel)
        fields = column_fields(layout, types)
        old_key_type = stream.old_key_type(
            [pa.field(lc.column.name, lc.codec.arrow_type) for lc in key])
        schema = pa.schema(fields + stream.system_fields(old_key_type))
        buf = _TableBuffer(rel, layout, key, schema, new_columns(layout, schema))
        self._buffers[id(rel)] = buf
        self._order.append(buf)
        return buf

    def _append(self, buf: _TableBuffer, txn: TxnInfo, lsn: int, seq: int, op: str,
                values: list[Any], old_key: dict[str, Any] | None,
                unchanged: list[str] | None, texts: dict[str, str] | None, size: int) -> None:
        cols = buf.columns
        n = len(values)
        for i, v in enumerate(values):
            cols[i].append(v)
        for i, v in enumerate((txn.final_lsn, txn.commit_time + stream.PG_EPOCH_US, txn.xid,
                               lsn, seq, op, old_key, unchanged, texts)):
            cols[n + i].append(v)
        buf.rows += 1
        buf.pending_bytes += size
        if len(cols[0]) >= self.rows_per_part or buf.pending_bytes >= self.bytes_per_part:
            self._flush(buf)

    def _flush(self, buf: _TableBuffer) -> None:
        if not len(buf.columns[0]):
            return
        arrays = [column_array(col, f.type) for col, f in zip(buf.columns, buf.schema,
                                                                strict=True)]
        table = pa.Table.from_arrays(arrays, schema=buf.schema)
        buf.paths.append(self.sink.part(buf.rel, buf.parts, table))
        buf.parts += 1
        buf.columns = new_columns(buf.layout, buf.schema)
        buf.pending_bytes = 0

    # -- end of batch ----------------------------------------------------------------------

    def finish(self) -> list[tuple[RelationVersion, list[str], int]]:
        """Hand every partial buffer to the sink; each relation version's part names and row
        count, in the order of their first rows (the manifest's order)."""
        for buf in self._order:
            self._flush(buf)
        return [(buf.rel, buf.paths, buf.rows) for buf in self._order]


def new_columns(layout: RowLayout, schema: pa.Schema) -> list[Any]:
    """A buffer's empty columns, one per field of ``schema`` (``layout``'s, then the system
    columns): lists of Python values here; the compiled twin builds most in Arrow's layout."""
    return [[] for _ in schema]


def column_array(column: Any, arrow_type: pa.DataType) -> pa.Array:
    """A column of :func:`new_columns` as an Arrow array of ``arrow_type``."""
    return pa.array(column, type=arrow_type)


new_columns = native.twin(new_columns, "cdclake.decoding.plugins._arrow")
column_array = native.twin(column_array, "cdclake.decoding.plugins._arrow")

#: what the compiled ``change`` hands a change with an old key or without a new tuple
ArrowRows._python_change = ArrowRows.change  # type: ignore[attr-defined]
ArrowRows.change = native.twin(  # type: ignore[method-assign]
    ArrowRows.change, "cdclake.decoding.plugins._arrow")


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
