"""Test helper: write change-stream batches in exactly the decoder's layout.

Until the decoder's Arrow plugin runs in these tests, batches are built here from
RelationVersion objects and pyarrow, following :mod:`cdclake.decoding.stream`: a
``_manifest.json`` and ``<schema>.<table>/v<valid_from:016X>/part-00000.parquet`` per version,
data columns then system columns, rows in commit then WAL order.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cdclake.catalog.model import (
    IDENTITY_DEFAULT,
    IDENTITY_FULL,
    IDENTITY_NOTHING,
    Column,
    RelationVersion,
)
from cdclake.decoding import stream

EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Rel:
    """A relation version plus the Arrow type of each live column."""

    version: RelationVersion
    types: dict[str, pa.DataType]
    #: enum columns: name -> pg_enum oid -> label, as the decoder's field metadata says
    enums: Mapping[str, Mapping[int, str]] = field(default_factory=dict)

    @property
    def live(self) -> tuple[Column, ...]:
        return self.version.live_columns()

    def key_columns(self) -> tuple[Column, ...]:
        v = self.version
        if v.replident == IDENTITY_FULL:
            return self.live
        if v.replident == IDENTITY_NOTHING:
            return ()
        return tuple(c for c in self.live if c.attnum in v.key_attnums)

    def old_key_type(self) -> pa.StructType:
        """As the decoder types it (a placeholder struct for a table without identity)."""
        return stream.old_key_type([pa.field(c.name, self.types[c.name])
                                    for c in self.key_columns()])

    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, self.types[c.name],
                           metadata=stream.enum_metadata(
                               dict(self.enums[c.name]) if c.name in self.enums else None))
                  for c in self.live]
        return pa.schema(fields + stream.system_fields(self.old_key_type()))

    def evolve(self, valid_from: int, *, add: Sequence[tuple[str, pa.DataType]] = (),
               drop: Sequence[str] = (), rename: Mapping[str, str] | None = None,
               retype: Mapping[str, pa.DataType] | None = None,
               defaults: Mapping[str, str] | None = None, replident: str | None = None,
               key: Sequence[str] | None = None) -> Rel:
        """The next version, as ALTER TABLE would make it (attnums kept, dropped slots kept)."""
        rename = dict(rename or {})
        retype = dict(retype or {})
        defaults = dict(defaults or {})
        cols = []
        types: dict[str, pa.DataType] = {}
        for c in self.version.columns:
            if c.dropped:
                cols.append(c)
                continue
            if c.name in drop:
                cols.append(dataclasses.replace(c, dropped=True,
                                                name=f"........pg.dropped.{c.attnum}........"))
                continue
            name = rename.get(c.name, c.name)
            cols.append(dataclasses.replace(c, name=name, quoted=name))
            types[name] = retype.get(c.name, self.types[c.name])
        for name, t in add:
            attnum = len(cols) + 1
            cols.append(column(attnum, name, has_missing=name in defaults,
                               missing_text=defaults.get(name)))
            types[name] = t
        key_attnums = self.version.key_attnums
        if key is not None:
            key_attnums = tuple(c.attnum for c in cols if c.name in key and not c.dropped)
        version = dataclasses.replace(self.version, columns=tuple(cols), valid_from=valid_from,
                                      key_attnums=key_attnums,
                                      replident=replident or self.version.replident)
        return Rel(version, types)


def column(attnum: int, name: str, *, has_missing: bool = False,
           missing_text: str | None = None) -> Column:
    # type facts do not matter to the lake: it types columns by their Arrow type
    return Column(attnum=attnum, name=name, quoted=name, type_oid=25, typmod=-1, attlen=-1,
                  attalign="i", attbyval=False, has_missing=has_missing,
                  missing_text=missing_text)


def relation(name: str, columns: Sequence[tuple[str, pa.DataType]], *, key: Sequence[str] = (),
             replident: str = IDENTITY_DEFAULT, oid: int = 16400, schema: str = "public",
             valid_from: int = 0x1000) -> Rel:
    cols = tuple(column(i + 1, n) for i, (n, _) in enumerate(columns))
    key_attnums = tuple(c.attnum for c in cols if c.name in key)
    version = RelationVersion(
        oid=oid, db_oid=5, tablespace=1663, relfilenode=oid, schema=schema, name=name,
        qualified=f"{schema}.{name}", relkind="r", persistence="p", replident=replident,
        columns=cols, key_attnums=key_attnums, valid_from=valid_from)
    return Rel(version, {n: t for n, t in columns})


@dataclass
class _Rows:
    rel: Rel
    rows: list[dict[str, Any]] = field(default_factory=list)


class Txn:
    """One source transaction: changes get increasing LSNs; the commit LSN comes last."""

    def __init__(self, batch: BatchBuilder, xid: int) -> None:
        self.batch = batch
        self.xid = xid
        self.pending: list[tuple[Rel, dict[str, Any]]] = []

    def _add(self, rel: Rel, op: str, data: Mapping[str, Any] | None,
             old: Mapping[str, Any] | None, unchanged: Sequence[str]) -> None:
        row = {c.name: (data or {}).get(c.name) for c in rel.live}
        row.update({stream.XID: self.xid, stream.LSN: self.batch.stream.next_lsn(),
                    stream.SEQ: 0, stream.OP: op,
                    stream.OLD_KEY: dict(old) if old is not None and rel.key_columns() else None,
                    stream.UNCHANGED_TOAST: list(unchanged) or None})
        self.pending.append((rel, row))

    def insert(self, rel: Rel, data: Mapping[str, Any]) -> None:
        self._add(rel, stream.OP_INSERT, data, None, ())

    def update(self, rel: Rel, data: Mapping[str, Any], *, old: Mapping[str, Any] | None = None,
               unchanged: Sequence[str] = ()) -> None:
        """``old``: the logged old identity (None when the key did not change)."""
        self._add(rel, stream.OP_UPDATE, data, old, unchanged)

    def delete(self, rel: Rel, old: Mapping[str, Any]) -> None:
        self._add(rel, stream.OP_DELETE, None, old, ())

    def truncate(self, rel: Rel) -> None:
        self._add(rel, stream.OP_TRUNCATE, None, None, ())

    def rewrite(self, rel: Rel, rows: Sequence[Mapping[str, Any]]) -> None:
        """A table rewrite: the ``W`` marker, then every row the rewrite wrote."""
        self._add(rel, stream.OP_REWRITE_BEGIN, None, None, ())
        marker = self.pending[-1][1]
        for data in rows:
            self._add(rel, stream.OP_REWRITE, data, None, ())
        if rows:  # the marker shares the first row's LSN and sorts before it
            marker[stream.LSN] = self.pending[-len(rows)][1][stream.LSN]
            marker[stream.SEQ] = -1


class Stream:
    """LSNs and transaction ids shared by the batches of one test."""

    def __init__(self, root: Path, lsn: int = 0x0100_0000) -> None:
        self.root = root
        self.lsn = lsn
        self.xid = 700

    def next_lsn(self) -> int:
        self.lsn += 0x40
        return self.lsn

    def batch(self, name: str) -> BatchBuilder:
        return BatchBuilder(self, name)


class BatchBuilder:
    def __init__(self, stream_: Stream, name: str) -> None:
        self.stream = stream_
        self.name = name
        self.start_lsn = stream_.lsn
        self.versions: dict[tuple[int, int], _Rows] = {}
        self.commits = 0

    @contextmanager
    def txn(self) -> Iterator[Txn]:
        self.stream.xid += 1
        t = Txn(self, self.stream.xid)
        yield t
        commit_lsn = self.stream.next_lsn()
        ts = EPOCH + dt.timedelta(seconds=commit_lsn // 0x40)
        for rel, row in t.pending:
            row[stream.COMMIT_LSN] = commit_lsn
            row[stream.COMMIT_TS] = ts
            key = (rel.version.oid, rel.version.valid_from)
            self.versions.setdefault(key, _Rows(rel)).rows.append(row)
        self.commits += 1

    def write(self, rows_per_part: int | None = None) -> Path:
        """Write the Parquet files (a version's rows in files of ``rows_per_part``, all in one
        by default) and ``_manifest.json``; returns the batch directory."""
        directory = self.stream.root / self.name
        tables: dict[int, dict[str, Any]] = {}
        for (oid, _), entry in sorted(self.versions.items()):
            v = entry.rel.version
            schema = entry.rel.arrow_schema()
            rows = sorted(entry.rows, key=lambda r: (r[stream.COMMIT_LSN], r[stream.LSN],
                                                     r[stream.SEQ]))
            size = rows_per_part or max(1, len(rows))
            paths = []
            for i in range(0, max(1, len(rows)), size):
                rel_path = f"{v.schema}.{v.name}/v{v.valid_from:016X}/part-{i // size:05d}.parquet"
                (directory / rel_path).parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.Table.from_pylist(rows[i:i + size], schema=schema),
                               directory / rel_path)
                paths.append(rel_path)
            tables.setdefault(oid, {"table": f"{v.schema}.{v.name}", "oid": oid,
                                    "versions": []})["versions"].append(
                {"valid_from": v.valid_from, "relation": v.to_json(), "paths": paths,
                 "rows": len(rows)})
        manifest = {"batch": self.name, "start_lsn": self.start_lsn, "end_lsn": self.stream.lsn,
                    "commits": self.commits, "tables": list(tables.values())}
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "_manifest.json").write_text(json.dumps(manifest, indent=1))
        return directory
