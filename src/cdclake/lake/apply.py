"""The merge's pure core: replay a table's changes on the mirror rows they can touch.

The state starts as the mirror rows inside the batch's affected region (see
:mod:`cdclake.lake.region`) and the changes are applied one by one, as the source applied them:
an INSERT adds a row, an UPDATE takes the row it names (by key, or for REPLICA IDENTITY FULL by
its whole old value — one copy of identical rows) and puts the new one, a DELETE takes it, a
TRUNCATE empties the state, and a table rewrite (``W`` then its ``R`` rows) replaces it. A
version whose column types no longer hold the rows' values converts them as PostgreSQL reads
them (:mod:`cdclake.lake.retype`); after a rewrite no row is left to convert.
Because the replay is sequential, "last change per key wins", a key-changing UPDATE removing
the old key, and unchanged-TOAST columns taking the value of the row they replace (whether
that row came from the mirror or from earlier in the batch) all fall out of one rule instead
of special cases. What is left in the state replaces the region.
Nothing here does I/O. Values are as :mod:`cdclake.lake.values` holds them: a value kept as
exact text is a ``PgText``, matched and carried over like any other value (so an unchanged
TOASTed column keeps its text, and a row's texts are always those of its current values).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pyiceberg.types import IcebergType

from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake import retype
from cdclake.lake.changes import CLEARING_OPS, FULL, KEY, NOTHING, Change, Identity, VersionInfo
from cdclake.lake.defaults import Unparsed
from cdclake.lake.rules import PY, looked_up
from cdclake.lsn import format_lsn


class Row:
    """A mirror row: values by attnum plus the commit that wrote it."""

    __slots__ = ("commit_lsn", "commit_ts", "values")

    def __init__(self, values: dict[int, Any], commit_lsn: int | None,
                 commit_ts: dt.datetime | None) -> None:
        self.values = values
        self.commit_lsn = commit_lsn
        self.commit_ts = commit_ts

    def __repr__(self) -> str:
        return f"Row({self.values!r}, {self.commit_lsn})"


@dataclass(slots=True)
class Counts:
    """What the replay did, for the merge report."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    rewritten: int = 0  #: rows of table rewrites (ALTER TABLE, REFRESH MATERIALIZED VIEW)
    identity_nothing: int = 0  #: UPDATE/DELETE on a table without replica identity: not applied
    not_found: int = 0  #: UPDATE/DELETE whose old row was not in the mirror

    def to_json(self) -> dict[str, int]:
        return asdict(self)


_NAN = ("NaN",)


def canonical(value: Any) -> Hashable:
    """A hashable form in which equal SQL values compare equal (lists, NaN)."""
    if isinstance(value, list):
        return tuple(canonical(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, uuid.UUID):
        return value.bytes  # the change stream carries uuid as 16 bytes
    return value


def column_value(values: Mapping[int, Any], attnum: int, defaults: Mapping[int, Any],
                 table: str) -> Any:
    """A row's value for ``attnum``; a row from before an ADD COLUMN gets the column's
    default (attmissingval), exactly as PostgreSQL reads that row."""
    if attnum in values:
        return values[attnum]
    value = defaults.get(attnum)
    if isinstance(value, Unparsed):
        raise LakeError(f"table {table}: cannot fill column attnum {attnum} of rows written "
                        f"before it was added: default {value.text!r} ({value.reason})")
    return value


class MirrorState:
    """Rows of the affected region, indexed by the current version's identity, their values
    held in the Iceberg types ``types`` says (attnum -> type: the mirror's, to begin with)."""

    def __init__(self, rows: Iterable[Row], table: str,
                 types: Mapping[int, IcebergType] | None = None) -> None:
        self.table = table
        self._rows: list[Row | None] = list(rows)
        self._index: dict[Hashable, list[int]] = {}
        self._identity: Identity | None = None
        self._defaults: Mapping[int, Any] = {}
        self._version: VersionInfo | None = None
        self.types: dict[int, IcebergType] = dict(types or {})

    def rows(self) -> list[Row]:
        return [r for r in self._rows if r is not None]

    def use(self, version: VersionInfo) -> None:
        """Hold the rows as this version types them and index them by its identity (a batch
        may change the key, the columns or their types)."""
        if version is self._version:
            return
        self._version = version
        converted = self._retype(version)
        if (not converted and version.identity == self._identity
                and version.defaults == self._defaults):
            return
        self._identity = version.identity
        self._defaults = version.defaults
        self._index = defaultdict(list)
        if self._identity.kind != NOTHING:
            for i, row in enumerate(self._rows):
                if row is not None:
                    self._index[self.key(row.values)].append(i)

    def _retype(self, version: VersionInfo) -> bool:
        """Convert the rows' values of the columns whose type changed where no promotion
        holds them (:mod:`cdclake.lake.retype`); whether any did."""
        steps = retype.step(self.types, version.columns)
        for st in steps:
            held = [r for r in self._rows
                    if r is not None and r.values.get(st.attnum) is not None]
            if held and st.convert is None:
                raise LakeError(
                    f"table {self.table}: {st.describe()} (relation version at LSN "
                    f"{format_lsn(version.relation.valid_from)}), and {len(held)} row(s) of the "
                    "mirror hold the old type, but the stream has no table rewrite giving them "
                    "values of the new one; take the table's snapshot again: cdclake snapshot "
                    f"--tables {self.table}")
            for r in held:
                r.values[st.attnum] = st.convert(r.values[st.attnum])  # type: ignore[misc]
        return bool(steps)

    def key(self, values: Mapping[int, Any]) -> Hashable:
        assert self._identity is not None
        return tuple(canonical(column_value(values, a, self._defaults, self.table))
                     for a in self._identity.attnums)

    def insert(self, row: Row) -> None:
        assert self._identity is not None
        if self._identity.kind == KEY:
            self.take(self.key(row.values))  # a key identifies one row: replace, never duplicate
        self._rows.append(row)
        if self._identity.kind != NOTHING:
            self._index[self.key(row.values)].append(len(self._rows) - 1)

    def take(self, key: Hashable) -> Row | None:
        """Remove and return the row ``key`` names: by key every copy goes (the newest is
        returned); for FULL one copy of identical rows goes, as one DELETE removes one."""
        assert self._identity is not None
        positions = self._index.get(key)
        if not positions:
            return None
        if self._identity.kind == FULL:
            i = positions.pop(0)
            row = self._rows[i]
            self._rows[i] = None
            return row
        row = None
        for i in positions:
            row = self._rows[i]
            self._rows[i] = None
        del self._index[key]
        return row

    def clear(self) -> None:
        """No row any more: what comes next is held as its own version types it."""
        self._rows = []
        self._index = defaultdict(list)
        self._version = None
        self.types = {}


def apply_changes(state: MirrorState, changes: Iterable[Change], counts: Counts) -> None:
    """Replay ``changes`` (in source order) on ``state``, counting into ``counts``."""
    for ch in changes:
        if ch.op in CLEARING_OPS:  # before use: the rows it removes are not retyped
            state.clear()
        state.use(ch.version)
        kind = ch.version.identity.kind
        if ch.op == stream.OP_TRUNCATE:
            counts.truncated += 1
        elif ch.op == stream.OP_REWRITE_BEGIN:
            continue  # the rewrite's rows follow
        elif ch.op == stream.OP_REWRITE:
            assert ch.new is not None
            state.insert(Row(dict(ch.new), ch.commit_lsn, ch.commit_ts))
            counts.rewritten += 1
        elif ch.op == stream.OP_INSERT:
            assert ch.new is not None
            state.insert(Row(dict(ch.new), ch.commit_lsn, ch.commit_ts))
            counts.inserted += 1
        elif kind == NOTHING:
            counts.identity_nothing += 1
        elif ch.op == stream.OP_UPDATE:
            _update(state, ch, counts)
            counts.updated += 1
        else:
            if ch.old is None:
                raise LakeError(f"table {state.table}: DELETE at LSN {format_lsn(ch.lsn)} "
                                "carries no old identity; the change stream is malformed")
            if state.take(state.key(ch.old)) is None:
                counts.not_found += 1
            counts.deleted += 1


def _update(state: MirrorState, ch: Change, counts: Counts) -> None:
    assert ch.new is not None
    kind = ch.version.identity.kind
    if kind == FULL and ch.old is None:
        raise LakeError(f"table {state.table}: UPDATE at LSN {format_lsn(ch.lsn)} under "
                        "REPLICA IDENTITY FULL carries no old row; the change stream is malformed")
    if ch.old is None and set(ch.unchanged) & set(ch.version.identity.attnums):
        raise LakeError(f"table {state.table}: UPDATE at LSN {format_lsn(ch.lsn)} logged "
                        "neither the key nor its old value")
    old_row = state.take(state.key(looked_up(PY, ch.old is not None, ch.old, ch.new)))
    new = dict(ch.new)
    if ch.unchanged:
        # FULL logs the whole old row, TOASTed values inlined: it is a source as good as the row
        source = old_row.values if old_row is not None else (ch.old if kind == FULL else None)
        if source is None:
            raise LakeError(
                f"table {state.table}: UPDATE at LSN {format_lsn(ch.lsn)} (commit "
                f"{format_lsn(ch.commit_lsn)}) left TOASTed columns "
                f"{[a for a in ch.unchanged]} (attnums) unchanged, but the row is not in the "
                f"mirror to take their values from; snapshot the table again: cdclake snapshot "
                f"--tables {state.table}")
        for a in ch.unchanged:
            new[a] = column_value(source, a, ch.version.defaults, state.table)
    if old_row is None:
        counts.not_found += 1
    state.insert(Row(new, ch.commit_lsn, ch.commit_ts))
