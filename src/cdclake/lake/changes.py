"""A table's change rows as Python records keyed by attnum, in commit then WAL order.

Columns are keyed by PostgreSQL attnum rather than name so rows written under different
relation versions of one batch (before and after a RENAME, ADD or DROP COLUMN) line up. The
versions' streams are each sorted; they are merged on (commit LSN, LSN, seq) — the order the
source applied them — and a stream that is not sorted is refused, because applying changes out
of order would silently pick the wrong "last change".

Values are read as the merge holds them (:mod:`cdclake.lake.values`): temporal columns as
storage integers, and a value the stream keeps in ``_cdc_pg_text`` as a :class:`PgText` at its
attnum (one it could not print as ``UNPRINTED``), in the new row and in the old identity alike.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cdclake.catalog.model import IDENTITY_FULL, IDENTITY_NOTHING, RelationVersion
from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake.batch import TableChanges
from cdclake.lake.defaults import missing_defaults
from cdclake.lake.labels import Labels, combine, relabel, translation, version_labels
from cdclake.lake.schema import DataColumn, data_columns
from cdclake.lake.values import parse_texts, plain_values, with_texts
from cdclake.lsn import format_lsn

KEY = "key"
FULL = "full"
NOTHING = "nothing"


@dataclass(frozen=True, slots=True)
class Identity:
    """How a change finds its row: by key columns, by the whole row (FULL), or not at all."""

    kind: str
    attnums: tuple[int, ...]  #: key columns (KEY) or every live column (FULL)

    @classmethod
    def of(cls, rel: RelationVersion) -> Identity:
        if rel.replident == IDENTITY_FULL:
            return cls(FULL, tuple(c.attnum for c in rel.live_columns()))
        if rel.replident == IDENTITY_NOTHING or not rel.key_attnums:
            # DEFAULT without a primary key logs no old key either: same as NOTHING
            return cls(NOTHING, ())
        return cls(KEY, tuple(rel.key_attnums))


@dataclass(frozen=True, slots=True, eq=False)
class VersionInfo:
    """What applying a version's rows needs, computed once per version."""

    relation: RelationVersion
    identity: Identity
    columns: tuple[DataColumn, ...]
    names: dict[str, int]  #: column name under this version -> attnum
    arrow_schema: pa.Schema  #: the version's change-stream schema
    defaults: dict[int, Any] = field(default_factory=dict)  #: attnum -> ADD COLUMN default
    labels: Labels = field(default_factory=dict)  #: enum columns: attnum -> oid -> label

    @property
    def attnums(self) -> tuple[int, ...]:
        return tuple(c.attnum for c in self.columns)

    @classmethod
    def of(cls, rel: RelationVersion, arrow_schema: pa.Schema) -> VersionInfo:
        cols = tuple(data_columns(rel, arrow_schema))
        names = {c.name: c.attnum for c in cols}
        return cls(rel, Identity.of(rel), cols, names, arrow_schema,
                   missing_defaults(rel, arrow_schema), version_labels(arrow_schema, names))


@dataclass(frozen=True, slots=True, eq=False)
class Change:
    """One change row of the stream."""

    version: VersionInfo
    op: str
    commit_lsn: int
    commit_ts: dt.datetime
    xid: int
    lsn: int
    seq: int
    new: dict[int, Any] | None  #: attnum -> value or PgText (None for D and T)
    old: dict[int, Any] | None  #: old identity, attnum -> value or PgText, when logged
    unchanged: tuple[int, ...]  #: attnums whose TOASTed value was not logged

    @property
    def order(self) -> tuple[int, int, int]:
        """Its place in the stream's order (:data:`cdclake.lake.rules.ORDER`)."""
        return (self.commit_lsn, self.lsn, self.seq)


def version_changes(info: VersionInfo, table: pa.Table, where: str) -> list[Change]:
    """The rows of one version's Parquet data as :class:`Change` records."""
    # data values as the merge holds them; system columns (a real commit time) as they are
    held = {c.name for c in info.columns} | {stream.OLD_KEY}
    cols = {name: plain_values(table.column(name)) if name in held
            else table.column(name).to_pylist() for name in table.column_names}
    data = [(c.attnum, cols[c.name]) for c in info.columns]
    texts = cols.get(stream.PG_TEXT)  # absent from batches of older decoders
    attnums = info.attnums
    nothing = info.identity.kind == NOTHING
    out: list[Change] = []
    for i in range(table.num_rows):
        op = cols[stream.OP][i]
        if op not in _OPS:
            raise LakeError(f"{where}: unknown _op {op!r} at LSN {format_lsn(cols[stream.LSN][i])}")
        new = None
        if op in _ROW_OPS:
            new = {a: values[i] for a, values in data}
            if texts is not None and texts[i]:
                with_texts(new, parse_texts(texts[i], attnums, where, unprinted=True))
        # NOTHING logs no old identity: whatever the column holds (the decoder cannot write an
        # empty struct to Parquet) is not read
        old_struct = None if nothing else cols[stream.OLD_KEY][i]
        old = None
        if old_struct is not None:
            old_texts = old_struct.pop(stream.PG_TEXT, None)
            try:
                old = {info.names[name]: v for name, v in old_struct.items()}
            except KeyError as exc:
                raise LakeError(f"{where}: old key names column {exc} that the relation version "
                                "does not have") from exc
            if old_texts:
                with_texts(old, parse_texts(old_texts, old, where, unprinted=True))
        toast = cols[stream.UNCHANGED_TOAST][i] or ()
        try:
            unchanged = tuple(info.names[n] for n in toast)
        except KeyError as exc:
            raise LakeError(f"{where}: _unchanged_toast names unknown column {exc}") from exc
        out.append(Change(info, op, cols[stream.COMMIT_LSN][i], cols[stream.COMMIT_TS][i],
                          cols[stream.XID][i], cols[stream.LSN][i], cols[stream.SEQ][i],
                          new, old, unchanged))
    for prev, cur in itertools.pairwise(out):
        if cur.order < prev.order:
            raise LakeError(f"{where}: rows are not in commit/WAL order at LSN "
                            f"{format_lsn(cur.lsn)} (commit {format_lsn(cur.commit_lsn)})")
    return out


_OPS = frozenset({stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE, stream.OP_TRUNCATE,
                  stream.OP_REWRITE_BEGIN, stream.OP_REWRITE})
_ROW_OPS = frozenset({stream.OP_INSERT, stream.OP_UPDATE, stream.OP_REWRITE})
#: ops that replace every row the table had
CLEARING_OPS = frozenset({stream.OP_TRUNCATE, stream.OP_REWRITE_BEGIN})


def ordered_changes(per_version: Sequence[list[Change]]) -> Iterator[Change]:
    """Merge the versions' sorted streams into the source's order."""
    return heapq.merge(*per_version, key=lambda c: c.order)


def versions_of(changes: Sequence[Change]) -> list[VersionInfo]:
    """The relation versions of ``changes``, in their order."""
    return list({id(c.version): c.version for c in changes}.values())


@dataclass(frozen=True)
class Prepared:
    """A table's batch, decoded once and reused by every commit attempt."""

    source: TableChanges
    versions: tuple[VersionInfo, ...]
    changes: tuple[Change, ...]
    labels: Labels = field(default_factory=dict)  #: the newest enum labels of each column

    @property
    def last_lsn(self) -> int:
        return self.changes[-1].commit_lsn


def prepare(source: TableChanges, batch: str, *, relabel_enums: bool = True) -> Prepared:
    """The batch's changes of one table in source order. A mirror shows enum values with the
    labels they have now (``relabel_enums``); a changelog keeps them as each change wrote them.
    """
    infos: list[VersionInfo] = []
    per_version: list[list[Change]] = []
    defaults: dict[int, Any] = {}
    for v in source.versions:
        if v.changes.num_rows == 0:
            continue
        info = VersionInfo.of(v.relation, v.changes.schema)
        # A row written before ADD COLUMN ... DEFAULT reads the default for as long as it is
        # not rewritten, even after a later version no longer names it (a rewrite that
        # materialized it clears attmissingval; the rewrite's own rows then carry it).
        live = set(info.attnums)
        defaults = {a: d for a, d in defaults.items() if a in live} | info.defaults
        info = dataclasses.replace(info, defaults=dict(defaults))
        where = f"batch {batch}, table {source.table}, version v{v.relation.valid_from:X}"
        infos.append(info)
        per_version.append(version_changes(info, v.changes, where))
    labels = combine(i.labels for i in infos)
    for info, changes in zip(infos, per_version, strict=True) if relabel_enums else ():
        tr = translation(info.labels, labels)  # ALTER TYPE ... RENAME VALUE in between
        for ch in changes if tr else ():
            relabel(ch.new, tr)
            relabel(ch.old, tr)
    return Prepared(source, tuple(infos), tuple(ordered_changes(per_version)), labels)
