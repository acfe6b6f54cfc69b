"""A column's type changed in the source: which values a mirror must hold under the new type.

PostgreSQL changes a column's type (``ALTER COLUMN ... TYPE``) in one of two ways. Most changes
rewrite the table: every row is written again with the value the cast or ``USING`` expression
computed, and the change stream carries those rows (a ``W`` then its ``R`` rows,
:mod:`cdclake.decoding.stream`). The merge replaces the mirror's rows with them, so no stored
value has to be converted, whatever the two types: a field whose Iceberg type cannot hold the
new values is replaced by a new one (a new field id, same name and attnum) in that same commit.

A few changes keep the stored bytes: a binary-coercible type (``varchar`` -> ``text``, a domain
without constraints), a typmod every stored value already fits (``numeric(p,s)`` ->
``numeric``, ``varchar(5)`` -> ``varchar(10)``), and ``timestamp`` <-> ``timestamptz`` when the
ALTER's session runs with TimeZone UTC. PostgreSQL then reads each stored value under the new
type as it is, and the mirror must too: where the lake maps the two types to different Iceberg
types, the stored values are converted (:func:`conversion`), exactly — a ``decimal(p,s)``
becomes the numeric's text, a timestamp's microseconds stay what they are. No other change keeps
the stored bytes with a different Iceberg type; should rows of the old type meet one anyway (a
mirror that does not hold what the stream says), the merge stops for that table, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    IcebergType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from cdclake.lake.schema import DataColumn, field_types
from cdclake.lake.typemap import promoted
from cdclake.lake.values import PgText

#: a value as the merge holds it (:mod:`cdclake.lake.values`) -> the same value under the new type
Conversion = Callable[[Any], Any]

#: what PostgreSQL prints after a timestamptz in UTC
_UTC = "+00"


def _numeric_text(value: Any) -> Any:
    """A numeric(p,s) value as a numeric without typmod holds it: its text, with the scale's
    digits (``1.50``); NaN, kept as exact text in a decimal column, is a value of its own."""
    return value.text if isinstance(value, PgText) else format(Decimal(value), "f")


def _to_timestamptz(value: Any) -> Any:
    """Microseconds stay microseconds (the instant, UTC); a timestamp kept as exact text (past
    what int64 microseconds reach) is printed with its offset."""
    return PgText(value.text + _UTC) if isinstance(value, PgText) else value


def _to_timestamp(value: Any) -> Any:
    if isinstance(value, PgText):
        return PgText(value.text.removesuffix(_UTC))
    return value


def conversion(old: IcebergType, new: IcebergType) -> Conversion | None:
    """How a value held in ``old`` reads under ``new`` after a type change PostgreSQL made
    without rewriting the table; None when no such change exists between those types."""
    if isinstance(old, DecimalType) and isinstance(new, StringType):
        return _numeric_text
    if isinstance(old, TimestampType) and isinstance(new, TimestamptzType):
        return _to_timestamptz
    if isinstance(old, TimestamptzType) and isinstance(new, TimestampType):
        return _to_timestamp
    return None


@dataclass(frozen=True, slots=True)
class Retype:
    """A column whose values move to a type that does not hold the old ones."""

    attnum: int
    name: str
    old: IcebergType
    new: IcebergType
    #: how a stored value becomes the new type's; None: only a rewrite can give one
    convert: Conversion | None

    def describe(self) -> str:
        return (f"column {self.name} (attnum {self.attnum}) changed type from {self.old} to "
                f"{self.new}")


def step(held: dict[int, IcebergType], columns: Iterable[DataColumn]) -> list[Retype]:
    """Move ``held`` (attnum -> the Iceberg type a column's values are held in) to a relation
    version's ``columns``. A type that holds the old values too — the same, a promotion
    Iceberg allows, or a narrower one the held type already holds — changes nothing else;
    any other change is returned."""
    out = []
    for c in columns:
        old = held.get(c.attnum)
        kept = c.type if old is None else promoted(old, c.type)
        if kept is None:
            assert old is not None
            out.append(Retype(c.attnum, c.name, old, c.type, conversion(old, c.type)))
            kept = c.type
        held[c.attnum] = kept
    return out


def held_through(current: Mapping[int, IcebergType],
                 versions: Iterable[Sequence[DataColumn]]) -> tuple[dict[int, IcebergType],
                                                                     list[Retype]]:
    """:func:`step` over ``versions`` (oldest first) from ``current``: the types the values
    end up held in, and every change on the way that is no promotion."""
    held = dict(current)
    steps: list[Retype] = []
    for columns in versions:
        steps += step(held, columns)
    return held, steps


def typed(columns: Iterable[DataColumn], held: Mapping[int, IcebergType]) -> list[DataColumn]:
    """``columns`` (a version's) with the types their values are held in."""
    return [DataColumn(c.attnum, c.name, held[c.attnum]) for c in columns]


def evolved_columns(current: Schema, table: str, versions: Sequence[Sequence[DataColumn]]
                    ) -> tuple[list[DataColumn], list[Retype]]:
    """The last of ``versions`` (a batch's, oldest first) typed as the values of every version
    are held from the mirror schema ``current`` on, and the changes no promotion holds: what
    the commit must replace or convert when every row it keeps may be one written earlier."""
    held, steps = held_through(field_types(current, table), versions)
    return typed(versions[-1], held), steps
