"""Which mirror rows a batch can touch, and so which data files its commit rewrites.

A change names its row by identity: the key, or (REPLICA IDENTITY FULL) the whole old row. The
:class:`Region` holds those identities per relation-version identity, and an Iceberg filter
that prunes data files by their column metrics (``In`` per key column, and for FULL
``In``/``IsNull`` on the columns Iceberg can filter). The merge reads the candidate files, keeps
those that really hold a touched row, replays the batch on all of their rows and replaces
exactly those files: a copy-on-write rewrite decided by cdclake's own row matching, so it works
for every column type (pyiceberg 0.12 cannot evaluate row filters on uuid columns) and rows
that merely share a file with a touched one are written back unchanged.

An identity value kept as exact text (:class:`~cdclake.lake.values.PgText`) is NULL in its
typed column, so the filter looks for NULL there and the exact match happens on the rows read.
Temporal values are storage integers, which pyiceberg binds to date/timestamp literals as such.

When the filter would be large the whole table is read (still rewriting only touched files);
when existing rows need a new column's default, or the batch moves between tables with and
without an identity, every row counts as touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any

from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    In,
    IsNull,
    Or,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from cdclake.decoding import stream
from cdclake.lake.apply import canonical, column_value
from cdclake.lake.changes import KEY, NOTHING, Change
from cdclake.lake.values import PgText

#: default: more distinct identities than this and the merge reads the whole table
MAX_FILTER_KEYS = 10_000

_WIDE = Context(prec=80)  # numeric(38, s) has more digits than the default context keeps

_FILTERABLE = (BooleanType, IntegerType, LongType, StringType, DateType, DecimalType,
               TimestampType, TimestamptzType, UUIDType)


@dataclass(frozen=True, slots=True)
class KeyGroup:
    """Identities named under one relation-version identity (key columns or all columns)."""

    attnums: tuple[int, ...]
    defaults: Mapping[int, Any]
    keys: frozenset[Hashable]

    def key(self, values: Mapping[int, Any], table: str) -> Hashable:
        return tuple(canonical(column_value(values, a, self.defaults, table))
                     for a in self.attnums)


@dataclass(frozen=True)
class Region:
    """The part of a mirror a batch can touch."""

    filter: BooleanExpression  #: prunes data files by metrics; AlwaysFalse: read nothing
    everything: bool = False  #: every row is touched (the whole table is rewritten)
    groups: tuple[KeyGroup, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return self.filter == AlwaysFalse()

    def touches(self, values: Mapping[int, Any], table: str) -> bool:
        return self.everything or any(g.key(values, table) in g.keys for g in self.groups)

    @property
    def strategy(self) -> str:
        if self.empty:
            return "append"
        if self.everything:
            return "full-rewrite"
        return "full-scan" if self.filter == AlwaysTrue() else "region"


NOTHING_TO_READ = Region(AlwaysFalse())
WHOLE_TABLE = Region(AlwaysTrue(), everything=True)


def _literal(value: Any, t: IcebergType) -> Any:
    if isinstance(t, UUIDType) and isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    if isinstance(t, DecimalType) and isinstance(value, Decimal) and value.is_finite():
        return _WIDE.quantize(value, Decimal(1).scaleb(-t.scale))
    return value


def column_filter(f: NestedField, values: set[Any]) -> BooleanExpression:
    """Rows whose column ``f`` holds one of ``values`` (a PgText: NULL in the typed column)."""
    values = {None if isinstance(v, PgText) else v for v in values}  # typed column: NULL
    present = sorted((_literal(v, f.field_type) for v in values if v is not None), key=repr)
    terms: list[BooleanExpression] = []
    # pyiceberg's predicates take (name, value) at run time; its pydantic models hide that
    if len(present) == 1:
        terms.append(EqualTo(f.name, present[0]))  # type: ignore[call-arg,arg-type]
    elif present:
        terms.append(In(f.name, present))  # type: ignore[call-arg,arg-type]
    if None in values:
        terms.append(IsNull(f.name))  # type: ignore[call-arg,arg-type]
    return terms[0] if len(terms) == 1 else Or(*terms)


def combine(terms: Sequence[BooleanExpression], op: type) -> BooleanExpression:
    return terms[0] if len(terms) == 1 else op(*terms)


def _identities(change: Change) -> list[dict[int, Any]]:
    """The identities a change names in the mirror (as attnum -> value)."""
    kind = change.version.identity.kind
    if kind == KEY:
        # an INSERT's key too: a row already in the mirror with it is replaced, never doubled
        return [v for v in (change.old, change.new) if v is not None]
    if change.op in (stream.OP_UPDATE, stream.OP_DELETE) and change.old is not None:
        return [change.old]  # FULL: inserts touch nothing already stored
    return []


def filter_limit(max_keys: int, table_rows: int | None) -> int:
    """How many identities a metrics filter may name before every file is read instead: at
    most ``max_keys``, and half the table's rows when known."""
    return max_keys if table_rows is None else min(max_keys, max(table_rows // 2, 1))


def affected_region(changes: Sequence[Change], mirror: Mapping[int, NestedField], *,
                    table: str, table_rows: int | None,
                    max_keys: int = MAX_FILTER_KEYS) -> Region:
    """The region of ``changes`` (no TRUNCATE among them) in a mirror whose data fields are
    ``mirror`` (attnum -> field); ``table_rows`` is the mirror's row count when known."""
    if not changes:
        return NOTHING_TO_READ
    kinds = {c.version.identity.kind for c in changes}
    if NOTHING in kinds and len(kinds) > 1:
        return WHOLE_TABLE  # identity added or removed inside the batch
    versions = {id(c.version): c.version for c in changes}.values()
    if any(a not in mirror for v in versions for a in v.defaults):
        return WHOLE_TABLE  # rows written before ADD COLUMN ... DEFAULT need the value
    if kinds == {NOTHING}:
        return NOTHING_TO_READ  # only inserts are applied: no stored row is read

    limit = filter_limit(max_keys, table_rows)
    named: dict[tuple[int, ...], tuple[Mapping[int, Any], list[dict[int, Any]]]] = {}
    for c in changes:
        ident = c.version.identity
        entry = named.setdefault(ident.attnums, (c.version.defaults, []))
        entry[1].extend(_identities(c))
    groups = []
    filters = []
    total = 0
    for attnums, (defaults, values) in named.items():
        if not values:
            continue
        group = KeyGroup(attnums, defaults, frozenset())
        keys = frozenset(group.key(v, table) for v in values)
        groups.append(KeyGroup(attnums, defaults, keys))
        total += len(keys)
        filters.append(_group_filter(attnums, values, mirror))
    if not groups:
        return NOTHING_TO_READ
    if total > limit or any(f == AlwaysTrue() for f in filters):
        return Region(AlwaysTrue(), groups=tuple(groups))
    return Region(combine(filters, Or), groups=tuple(groups))


def _group_filter(attnums: Sequence[int], values: Sequence[Mapping[int, Any]],
                  mirror: Mapping[int, NestedField]) -> BooleanExpression:
    """A metrics filter for rows with these identities: a superset is fine, it only prunes."""
    usable = [a for a in attnums
              if a in mirror and isinstance(mirror[a].field_type, _FILTERABLE)
              and all(a in v for v in values)]
    if not usable:
        return AlwaysTrue()
    return combine([column_filter(mirror[a], {v[a] for v in values}) for a in usable], And)
