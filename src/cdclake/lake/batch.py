"""Reading one decoded batch (``changes/<batch>/``) back, as the lake needs it.

The layout is the contract in :mod:`cdclake.decoding.stream`. The reader checks what a merge
relies on before anything is merged — the manifest's row counts, the system columns, the data
columns against the relation version — so a torn or foreign batch stops with an error naming
the batch, table and file instead of being merged partially. Tables are loaded one at a time
(iterate the :class:`Batch`), so a batch with many tables never sits in memory whole.

``root`` is the directory holding the batch directories (``<prefix>/changes``): a local path,
a ``file://`` or ``s3://`` URI, or a path on an explicit ``pyarrow.fs.FileSystem`` (an
``S3FileSystem`` configured for the object store's endpoint).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from cdclake.catalog.model import (
    RELKIND_MATVIEW,
    RELKIND_PARTITIONED,
    RELKIND_TABLE,
    Column,
    RelationVersion,
)
from cdclake.decoding import stream
from cdclake.errors import LakeError

MANIFEST = "_manifest.json"


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """A relation version's files in the manifest (not yet read)."""

    relation: RelationVersion
    paths: tuple[str, ...]  #: relative to the batch directory
    rows: int


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A source table's entry in the manifest: its versions in ``valid_from`` order."""

    table: str  #: ``schema.name`` as the manifest names it
    oid: int
    versions: tuple[VersionEntry, ...]


def manifest_rows(manifest: dict[str, Any]) -> dict[str, int]:
    """Change rows per table as a batch's manifest counts them (no Parquet read): what the
    decode step reports and a dry-run merge would take."""
    return {str(t["table"]): sum(int(v["rows"]) for v in t.get("versions", ()))
            for t in manifest.get("tables", ())}


def selected(tables: Sequence[str], name: str, relations: Iterable[RelationVersion]) -> bool:
    """Whether a selection of ``schema.table`` names takes a table: by the name the manifest
    gives it or the name of any of its versions (a table renamed in the batch answers to
    both)."""
    names = {name} | {f"{r.schema}.{r.name}" for r in relations}
    return bool(names & set(tables))


def unselectable(tables: Sequence[str], relations: Iterable[RelationVersion],
                 elsewhere: Iterable[str] = ()) -> list[str]:
    """Why names of a selection of ``schema.table`` would select nothing, each in a few
    words; [] when every one names a table whose rows the stream carries.

    ``relations`` are the stream's dictionary (every version it knows: a table renamed or
    dropped since is still known by its old name, and a table without changes is as good
    as any). A name it does not know is a typo (the closest known name suggested) unless
    it is in ``elsewhere`` (the source's tables now: created since the dictionary was
    written). A partitioned table holds no rows: its partitions do, and are named."""
    known: dict[str, list[RelationVersion]] = {}
    newest: dict[int, RelationVersion] = {}
    for r in relations:
        known.setdefault(f"{r.schema}.{r.name}", []).append(r)
        if r.oid not in newest or newest[r.oid].valid_from <= r.valid_from:
            newest[r.oid] = r
    children: dict[int, list[RelationVersion]] = {}
    for r in newest.values():
        if r.parent_oid and not r.dropped:
            children.setdefault(r.parent_oid, []).append(r)

    def leaves(oid: int) -> list[str]:
        return sorted(n for c in children.get(oid, ()) for n in (
            leaves(c.oid) if c.relkind == RELKIND_PARTITIONED else [f"{c.schema}.{c.name}"]))

    rows = {name for name, versions in known.items()
            if any(v.relkind in (RELKIND_TABLE, RELKIND_MATVIEW) and not v.rewrite_of
                   for v in versions)}
    created_since = set(elsewhere)
    out = []
    for name in tables:
        parents = [v for v in known.get(name, ()) if v.relkind == RELKIND_PARTITIONED]
        if name in rows or (not parents and name in created_since):
            continue
        if parents:
            parts = sorted({p for v in parents for p in leaves(v.oid)})
            out.append(f"{name} is a partitioned table, whose rows are in its partitions: "
                       + (f"name those ({', '.join(parts)})" if parts else "it has none yet"))
            continue
        close = difflib.get_close_matches(name, sorted(rows), n=1)
        out.append(f"{name} is not a table the stream's dictionary knows"
                   + (f" (did you mean {close[0]}?)" if close else ""))
    return out


@dataclass(frozen=True, slots=True)
class VersionChanges:
    """A relation version and the changes made under it, in commit then WAL order."""

    relation: RelationVersion
    changes: pa.Table


@dataclass(frozen=True, slots=True)
class TableChanges:
    """All of one source table's changes in a batch."""

    table: str
    oid: int
    versions: tuple[VersionChanges, ...]

    @property
    def latest(self) -> RelationVersion:
        """The newest definition: it names the mirror and gives its final schema."""
        return self.versions[-1].relation

    @property
    def rows(self) -> int:
        return sum(v.changes.num_rows for v in self.versions)


@dataclass(frozen=True)
class Batch:
    """A batch's manifest plus where to read its files; iterate for :class:`TableChanges`."""

    name: str
    start_lsn: int
    end_lsn: int
    commits: int
    entries: tuple[TableEntry, ...]
    filesystem: pafs.FileSystem
    directory: str  #: the batch directory on ``filesystem``

    def __iter__(self) -> Iterator[TableChanges]:
        for entry in self.entries:
            yield self.load(entry)

    def load(self, entry: TableEntry) -> TableChanges:
        """Read one table's Parquet files and check them against the manifest."""
        return TableChanges(entry.table, entry.oid,
                            tuple(self._load_version(entry, v) for v in entry.versions))

    def _load_version(self, entry: TableEntry, version: VersionEntry) -> VersionChanges:
        parts = list(self.parts(entry, version))
        where = _where(self, entry, version)
        if parts:
            try:
                table = pa.concat_tables(parts)
            except pa.ArrowInvalid as exc:
                raise LakeError(f"{where}: parts have different schemas: {exc}") from exc
        else:
            table = _empty_changes(version.relation)
        return VersionChanges(version.relation, table)

    def parts(self, entry: TableEntry, version: VersionEntry,
              columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """A version's Parquet files one at a time, in stream order, each checked against the
        relation (its whole schema, from the file's footer); only ``columns`` are read when
        given. After the last, that they hold the rows the manifest counts."""
        where = _where(self, entry, version)
        rows = 0
        for rel_path in version.paths:
            path = f"{self.directory}/{rel_path}"
            try:
                stored = pq.read_schema(path, filesystem=self.filesystem)
                old = stream.PG_TEXT not in stored.names  # decoded before _cdc_pg_text
                full = stored.append(pa.field(stream.PG_TEXT, stream.PG_TEXT_TYPE)) \
                    if old else stored
                check_columns(full, version.relation, where)
                names = full.names if columns is None else [
                    c for c in dict.fromkeys(columns) if c in full.names]
                part = pq.read_table(path, filesystem=self.filesystem,
                                     columns=[c for c in names if c in stored.names])
            except (OSError, pa.ArrowInvalid) as exc:
                raise LakeError(f"batch {self.name}: cannot read {path} of table "
                                f"{entry.table}: {exc}") from exc
            if old and stream.PG_TEXT in names:  # no exact texts to carry
                part = part.append_column(pa.field(stream.PG_TEXT, stream.PG_TEXT_TYPE),
                                          pa.nulls(part.num_rows, stream.PG_TEXT_TYPE))
            rows += part.num_rows
            yield part
        if rows != version.rows:
            raise LakeError(f"{where}: manifest says {version.rows} rows, files hold "
                            f"{rows}; the batch is incomplete — decode it again")


def combined(batches: Sequence[Batch]) -> Batch:
    """Consecutive batches of one stream as one: each table's changes of all of them, a
    relation version's parts one batch after the other (a later batch's transactions commit
    after an earlier one's), its versions in ``valid_from`` order. Merging them at once writes
    a table's mirror once for all of them: a copy-on-write merge rewrites the data files
    holding touched rows, and a backlog of batches that each update rows all over a table
    rewrote the whole table once a batch. Paths are relative to the directory holding the
    batch directories."""
    if len(batches) == 1:
        return batches[0]
    root = {b.directory.rpartition("/")[0] for b in batches}
    if len(root) != 1:
        raise ValueError(f"batches of different streams: {sorted(root)}")
    tables: dict[int, tuple[str, list[VersionEntry]]] = {}
    for b in batches:
        name = b.directory.rpartition("/")[2]
        for entry in b.entries:
            versions = tables.setdefault(entry.oid, (entry.table, []))[1]
            tables[entry.oid] = (entry.table, versions)  # as the newest batch names it
            for v in entry.versions:
                paths = tuple(f"{name}/{p}" for p in v.paths)
                at = next((i for i, o in enumerate(versions) if o.relation == v.relation), None)
                if at is None:
                    versions.append(VersionEntry(v.relation, paths, v.rows))
                else:
                    o = versions[at]
                    versions[at] = VersionEntry(o.relation, o.paths + paths, o.rows + v.rows)
    entries = tuple(TableEntry(table, oid, tuple(sorted(versions,
                                                        key=lambda v: v.relation.valid_from)))
                    for oid, (table, versions) in tables.items())
    first, last = batches[0], batches[-1]
    return Batch(name=f"{first.name}..{last.name}", start_lsn=first.start_lsn,
                 end_lsn=last.end_lsn, commits=sum(b.commits for b in batches), entries=entries,
                 filesystem=first.filesystem, directory=root.pop())


def _where(batch: Batch, entry: TableEntry, version: VersionEntry) -> str:
    return f"batch {batch.name}, table {entry.table}, version v{version.relation.valid_from:X}"


def check_columns(schema: pa.Schema, rel: RelationVersion, where: str) -> None:
    """Data columns must be the version's live columns, in order, then the system columns."""
    live = [c.name for c in rel.live_columns()]
    names = schema.names
    expected = [*live, *stream.SYSTEM_COLUMNS]
    if names != expected:
        raise LakeError(f"{where}: columns {names} do not match the relation version's live "
                        f"columns plus system columns {expected}")


def _empty_changes(rel: RelationVersion) -> pa.Table:
    """A version listed with no files: an empty table (its data types are unknown: null)."""
    cols = [pa.field(c.name, pa.null()) for c in rel.live_columns()]
    return pa.schema(cols + stream.system_fields(stream.old_key_type([]))).empty_table()


def resolve_root(root: str | Path, filesystem: pafs.FileSystem | None) -> tuple[
        pafs.FileSystem, str]:
    """A filesystem and a path on it for ``root`` (path, URI, or path on ``filesystem``)."""
    text = str(root)
    if filesystem is not None:
        return filesystem, text.rstrip("/")
    if "://" in text:
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, OSError) as exc:
            raise LakeError(f"cannot open change-stream root {text}: {exc}") from exc
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), str(Path(text).resolve())


def read_batch(root: str | Path, batch: str,
               filesystem: pafs.FileSystem | None = None) -> Batch:
    """Read ``<root>/<batch>/_manifest.json``; table files are read when iterated."""
    fs, base = resolve_root(root, filesystem)
    directory = f"{base}/{batch}"
    path = f"{directory}/{MANIFEST}"
    try:
        with fs.open_input_stream(path) as f:
            manifest = json.loads(f.read().decode())
    except FileNotFoundError as exc:
        raise LakeError(f"batch {batch}: no manifest at {path}; was the batch decoded "
                        "completely?") from exc
    except (OSError, ValueError) as exc:
        raise LakeError(f"batch {batch}: cannot read manifest {path}: {exc}") from exc
    return parse_manifest(manifest, batch, fs, directory)


def parse_manifest(manifest: dict[str, Any], batch: str, fs: pafs.FileSystem,
                   directory: str) -> Batch:
    try:
        entries = tuple(
            TableEntry(
                table=str(t["table"]), oid=int(t["oid"]),
                versions=tuple(VersionEntry(relation_from_json(v["relation"]),
                                            tuple(v["paths"]), int(v["rows"]))
                               for v in t["versions"]))
            for t in manifest["tables"])
        result = Batch(name=str(manifest.get("batch", batch)),
                       start_lsn=int(manifest["start_lsn"]), end_lsn=int(manifest["end_lsn"]),
                       commits=int(manifest["commits"]), entries=entries, filesystem=fs,
                       directory=directory)
    except (KeyError, TypeError, ValueError) as exc:
        raise LakeError(f"batch {batch}: malformed manifest in {directory}: "
                        f"{type(exc).__name__}: {exc}") from exc
    for entry in entries:
        starts = [v.relation.valid_from for v in entry.versions]
        if not entry.versions or starts != sorted(starts):
            raise LakeError(f"batch {batch}, table {entry.table}: versions must be listed in "
                            f"valid_from order, got {starts}")
    return result


def relation_from_json(data: dict[str, Any]) -> RelationVersion:
    """The inverse of ``RelationVersion.to_json()`` (lists back to tuples)."""
    col_fields = {f.name for f in fields(Column)}
    rel_fields = {f.name for f in fields(RelationVersion)}
    columns = tuple(Column(**{k: v for k, v in c.items() if k in col_fields})
                    for c in data["columns"])
    values = {k: v for k, v in data.items() if k in rel_fields}
    values["columns"] = columns
    values["key_attnums"] = tuple(data.get("key_attnums", ()))
    return RelationVersion(**values)
