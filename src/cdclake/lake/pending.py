"""The decoded batches in the store, and which of them the lake still has to take.

The pipeline keeps no state of its own between tasks: what is pending is derived every time
from two durable facts — the batches the decoder finished (each has a ``_manifest.json``,
written last) and the stream's merged end LSN in the Iceberg namespace (advanced only when a
batch was merged into every table). So a decode whose merge failed is not forgotten when the
next decode has nothing new, a retried task redoes exactly what is missing, and any task can
be re-run on its own. Of the pending batches the merge takes those whose stream validation
is recorded (:mod:`cdclake.lake.validated`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdclake.archive import Layout, ObjectStore
from cdclake.archive.arrowfs import arrow_filesystem
from cdclake.archive.store import sha256_hex
from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.batch import MANIFEST, Batch, manifest_rows, parse_manifest, selected


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch the decoder completed: its manifest and where it lives."""

    name: str
    start_lsn: int
    end_lsn: int
    commits: int
    manifest: dict[str, Any]
    #: sha256 of the manifest's bytes: a batch decoded again is another batch (its parts
    #: are another decode's), whatever its name
    sha256: str

    def rows(self) -> dict[str, int]:
        """Change rows per table, from the manifest (no Parquet read)."""
        return manifest_rows(self.manifest)


def list_batches(store: ObjectStore, layout: Layout) -> list[DecodedBatch]:
    """Every completed batch, in stream order (start LSN). A batch directory without a
    manifest is a decode that did not finish: it is not a batch yet and is skipped."""
    prefix = layout.changes_root()
    out = []
    for info in store.list(prefix):
        rest = info.key[len(prefix):]
        parts = rest.split("/")
        if len(parts) != 2 or parts[1] != MANIFEST:
            continue
        try:
            data = store.get(info.key)
            manifest = json.loads(data)
            out.append(DecodedBatch(str(manifest.get("batch", parts[0])),
                                    int(manifest["start_lsn"]), int(manifest["end_lsn"]),
                                    int(manifest.get("commits", 0)), manifest,
                                    sha256_hex(data)))
        except (ValueError, KeyError, TypeError) as exc:
            raise LakeError(f"batch {parts[0]}: manifest {store.url(info.key)} is not valid "
                            f"({type(exc).__name__}: {exc}); decode the batch again") from exc
    out.sort(key=lambda b: (b.start_lsn, b.end_lsn, b.name))
    return out


def pending(batches: list[DecodedBatch], merged_end_lsn: int | None) -> list[DecodedBatch]:
    """Batches not yet merged into every table (end past the stream's merged end LSN)."""
    return [b for b in batches if merged_end_lsn is None or b.end_lsn > merged_end_lsn]


def merge_groups(batches: Sequence[DecodedBatch], max_rows: int
                 ) -> Iterator[list[DecodedBatch]]:
    """Consecutive ``batches`` in groups the merge takes at once
    (:func:`cdclake.lake.batch.combined`): as many as hold at most ``max_rows`` changes
    together, by their manifests; a batch with more is a group alone."""
    group: list[DecodedBatch] = []
    rows = 0
    for b in batches:
        n = sum(b.rows().values())
        if group and rows + n > max_rows:
            yield group
            group, rows = [], 0
        group.append(b)
        rows += n
    if group:
        yield group


def open_batch(config: Config, store: ObjectStore, layout: Layout,
               batch: DecodedBatch) -> Batch:
    """The lake's view of ``batch`` (tables read lazily), from the manifest already read."""
    filesystem, root = arrow_filesystem(config, store.url(layout.changes_root()))
    return parse_manifest(batch.manifest, batch.name, filesystem, f"{root}/{batch.name}")


def latest_relations(config: Config, store: ObjectStore, layout: Layout,
                     batches: list[DecodedBatch]) -> dict[str, RelationVersion]:
    """Each table's newest relation version across ``batches``, keyed as the manifests name
    the table (``schema.table``)."""
    out: dict[str, RelationVersion] = {}
    for decoded in batches:
        batch = open_batch(config, store, layout, decoded)
        for entry in batch.entries:
            rel = entry.versions[-1].relation
            if entry.table not in out or out[entry.table].valid_from <= rel.valid_from:
                out[entry.table] = rel
    return out


#: the most Arrow bytes a chunk of :func:`chunked` holds (besides its rows' bound): a wide
#: identity (REPLICA IDENTITY FULL) or long text makes a row of the checked columns large
CHUNK_BYTES = 128 << 20


def stream_chunks(batch: Batch, only: Sequence[str] = (), max_rows: int = 1_000_000,
                  columns: Callable[[RelationVersion], Sequence[str]] | None = None
                  ) -> Iterator[tuple[str, RelationVersion, pa.Table]]:
    """Each table's changes in the decoder's order (never sorted: the stream suite checks
    order), as consecutive chunks of at most ``max_rows`` rows and :data:`CHUNK_BYTES` (one
    or more whole Parquet files; a file is never split), so no more than a chunk is held at a
    time; with ``columns``, only the columns it names for the relation are read.

    A table's key is ``schema.table``, one per identity when the identity changed in the batch
    (``schema.table@v<valid_from>``); its relation is the version the suite reads the identity
    from (the newest when every version has the same)."""
    for entry in batch.entries:
        if only and not selected(only, entry.table, [v.relation for v in entry.versions]):
            continue
        identities = {(v.relation.replident, v.relation.key_attnums) for v in entry.versions}
        if len(identities) == 1:
            groups = [(entry.table, entry.versions[-1].relation, entry.versions)]
        else:
            groups = [(f"{entry.table}@v{v.relation.valid_from:016X}", v.relation, (v,))
                      for v in entry.versions]
        for name, relation, versions in groups:
            parts = (part for version in versions
                     for part in batch.parts(entry, version,
                                             None if columns is None else columns(relation)))
            for chunk in chunked(parts, max_rows):
                yield name, relation, chunk
                del chunk  # not held while the next is read


def chunked(pieces: Iterable[pa.Table | pa.RecordBatch], max_rows: int
            ) -> Iterator[pa.Table]:
    """``pieces`` gathered into consecutive tables of at most ``max_rows`` rows and
    :data:`CHUNK_BYTES` (a piece is never split: one larger than both is a chunk alone), each
    in one contiguous chunk per column: GX picks a check's offending rows with a take of
    every column, and a take over many chunks (one per Parquet batch read) copies the whole
    column each time — 12× slower on a million rows in 16 chunks. The pieces are let go
    before the chunk is handed on, so it is not held twice. A piece whose columns cannot join
    the chunk's (a column whose type changed between two relation versions of one identity,
    as two batches checked together may hold) starts the next chunk."""
    pending: list[pa.Table | pa.RecordBatch] = []
    rows = size = 0
    schema: pa.Schema | None = None
    for piece in pieces:
        joined = None if schema is None else _joined(schema, piece.schema)
        if pending and (rows + piece.num_rows > max_rows or size + piece.nbytes > CHUNK_BYTES
                        or joined is None):
            chunk, pending, rows, size = _concat(pending), [], 0, 0
            yield chunk
            del chunk
            joined = None
        schema = joined or piece.schema
        pending.append(piece)
        rows += piece.num_rows
        size += piece.nbytes
    if pending:
        chunk, pending = _concat(pending), []
        yield chunk


def _joined(schema: pa.Schema, other: pa.Schema) -> pa.Schema | None:
    """The schema of a chunk of both, as :func:`_concat` makes it; None when none exists."""
    try:
        return pa.unify_schemas([schema, other], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None


def _concat(pieces: list[pa.Table | pa.RecordBatch]) -> pa.Table:
    tables = [p if isinstance(p, pa.Table) else pa.Table.from_batches([p]) for p in pieces]
    # versions of one identity may differ in columns (ADD/DROP COLUMN): nulls fill them
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables,
                                                                promote_options="permissive")
    del tables, pieces[:]
    # a column at a time, each one's pieces let go as it is copied: the chunk is never twice
    # (a column of 2 GiB or more stays chunked: one chunk could not hold its offsets)
    schema, columns = table.schema, table.columns
    del table
    for i, column in enumerate(columns):
        if column.num_chunks > 1 and column.nbytes < 1 << 31:
            columns[i] = pa.chunked_array([column.combine_chunks()], column.type)
    return pa.Table.from_arrays(columns, schema=schema)
