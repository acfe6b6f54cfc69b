"""Column values as the merge holds them: storage integers for times, and exact text.

Two rules make every PostgreSQL value exact inside the merge:

* Temporal columns are held as their Arrow storage integers (date32 days, time64 and
  timestamp µs since 1970), never as Python ``date``/``datetime``: those stop at years
  1..9999, while a mirror holds BC dates, years past 9999 and ±infinity (date ±(2**31 - 1),
  timestamp ±(2**63 - 1), DuckDB's encodings). :func:`plain_values` reads any column that way.
* A value without a typed representation in its column (a 2-D array, NaN in a decimal column,
  time 24:00:00, ...) is a :class:`PgText`: the typed column holds NULL and the row's
  ``_cdc_pg_text`` map holds its text under the attnum. Inside the merge it is one value like
  any other — compared, matched by identity, carried over for unchanged TOAST — so a row's map
  is always rebuilt from its values, never merged with an older one.

A value the decoder could not print at all (an entry without text) is :data:`UNPRINTED`: no
merge applies a change holding one (:mod:`cdclake.lake.quarantine`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cdclake.errors import LakeError


@dataclass(frozen=True, slots=True)
class PgText:
    """A value kept as PostgreSQL's exact text (its typed column is NULL)."""

    text: str


class _Unprinted:
    """The type of :data:`UNPRINTED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNPRINTED"


#: a value of a type cdclake cannot print: its ``_cdc_pg_text`` entry has no text
UNPRINTED = _Unprinted()


def storage_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every date/time/timestamp (also inside lists and structs) as its integer
    storage, and extension types (pyiceberg reads uuid as arrow.uuid) as their storage."""
    if isinstance(t, pa.BaseExtensionType):
        return storage_type(t.storage_type)
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_time64(t) or pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, storage_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, storage_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, storage_type(f.type), f.nullable) for f in t])
    return t


def _storage_array(chunk: pa.Array, target: pa.DataType) -> pa.Array:
    if isinstance(chunk.type, pa.BaseExtensionType):
        chunk = chunk.storage
    if chunk.type == target:
        return chunk
    # timestamp/time -> int64 and date32 -> int32 reinterpret the storage: no range checks
    return chunk.view(target) if not pa.types.is_nested(target) else chunk.cast(target)


def plain_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Python values of a column, temporal types as their storage integers."""
    target = storage_type(column.type)
    if target == column.type:
        return column.to_pylist()
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return pa.chunked_array([_storage_array(c, target) for c in chunks],
                            type=target).to_pylist()


def parse_texts(entries: Iterable[tuple[str, str | None]] | None, known: Iterable[int],
                where: str, *, dropped_ok: bool = False,
                unprinted: bool = False) -> dict[int, str | None]:
    """A ``_cdc_pg_text`` map (as ``to_pylist`` gives it) as attnum -> text; a key that is no
    attnum of ``known`` columns means the data is not what the schema says: refused — except,
    with ``dropped_ok``, in a mirror, whose untouched files keep the entries of a column
    dropped since (Iceberg drops a column in its metadata only): those are left out. An entry
    without text is refused too, but in the change stream (``unprinted``): a value cdclake
    could not print, None here."""
    if not entries:
        return {}
    allowed = set(known)
    out: dict[int, str | None] = {}
    for key, text in entries:
        try:
            attnum = int(key)
        except (TypeError, ValueError):
            attnum = -1
        if attnum not in allowed and dropped_ok and attnum > 0:
            continue
        if attnum not in allowed or (text is None and not unprinted):
            raise LakeError(f"{where}: _cdc_pg_text entry {key!r} names no column (attnum) of "
                            "the table, or has no text")
        out[attnum] = text
    return out


def with_texts(values: dict[int, Any], texts: Mapping[int, str | None]) -> dict[int, Any]:
    """``values`` with each attnum of ``texts`` replaced by its :class:`PgText` (in place);
    :data:`UNPRINTED` for an entry without text."""
    for attnum, text in texts.items():
        values[attnum] = UNPRINTED if text is None else PgText(text)
    return values


def split_texts(values: list[Any]) -> tuple[list[Any], list[str | None]]:
    """A column's values for Arrow: PgText -> NULL, plus each row's text (or None)."""
    typed: list[Any] = []
    texts: list[str | None] = []
    for v in values:
        if isinstance(v, PgText):
            typed.append(None)
            texts.append(v.text)
        else:
            typed.append(v)
            texts.append(None)
    return typed, texts
