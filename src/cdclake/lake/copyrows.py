"""Rows of ``COPY ... TO STDOUT`` (text format) as a mirror data file's Arrow table.

The initial snapshot copies each table's rows with COPY instead of decoding them from WAL, yet
a row must land in the mirror exactly as the change stream would have put it there: the same
typed value, the same NULL plus ``_cdc_pg_text`` entry for a value without a typed
representation. So nothing here maps types on its own. Each column goes through the codec the
change stream builds for the same relation version (:class:`cdclake.decoding.rows.LayoutCache`)
and its ``value_from_text`` — the path the Arrow plugin already takes for ``attmissingval``
text — into an array of the stream's Arrow type, then through the safe (lossless) cast the
mirror's schema evolution allows (int -> long, float -> double, a wider decimal). Temporal
values stay their Arrow storage integers throughout, exactly as :mod:`cdclake.lake.values`
holds them in the merge, so BC dates, years past 9999 and ±infinity arrive unchanged.

COPY prints each value with the type's output function under the session's settings; the
codecs parse PostgreSQL's output under one fixed set of them (:data:`SESSION_SETTINGS`), which
the copying session must apply first.

A virtual generated column (PostgreSQL 18) has no storage: the WAL logs it as NULL, so the
change stream — and therefore the mirror — holds NULL for it. COPY would compute it, so it is
left out of the select list and written as NULL here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.decoding.rows import LayoutCache, LiveColumn
from cdclake.errors import LakeError
from cdclake.lake.metrics import needs_counts_only
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    arrow_type,
    iceberg_type,
    mirror_fields,
    promoted,
)
from cdclake.tuples.untypeable import NotTypeable

__all__ = ["SESSION_SETTINGS", "CopyRows", "counts_only_columns", "quote_ident"]

#: The settings under which PostgreSQL prints what the codecs' ``value_from_text`` parses and
#: their ``text`` reproduces (cdclake.tuples.codecs): ISO dates with " BC", postgres interval
#: style, timestamptz in UTC ("+00"), shortest-exact floats (also inside geometric types),
#: hex bytea, money in the C locale, and UTF-8 text for the codecs' str values.
SESSION_SETTINGS: tuple[str, ...] = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, YMD'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET lc_monetary = 'C'",
    "SET client_encoding = 'UTF8'",
)

_VIRTUAL = "v"
_PG_TEXT_TYPE = pa.map_(pa.string(), pa.string())


def quote_ident(name: str) -> str:
    """``name`` as an always-quoted SQL identifier (embedded double quotes doubled)."""
    if "\x00" in name:
        raise LakeError(f"identifier {name!r} contains a NUL character")
    return '"' + name.replace('"', '""') + '"'


class CopyRows:
    """Converts one relation version's COPY rows into a mirror's data-file layout.

    ``types`` are the pg_type facts the version decodes with (a TypeCatalog is read at the
    version's ``valid_from``, as the change stream does); ``schema`` is the mirror's current
    Iceberg schema, its data columns tied to attnums; every row gets ``commit_lsn`` and
    ``commit_ts_us`` (µs since 1970, UTC) as its system values.
    """

    def __init__(self, rel: RelationVersion, types: Mapping[int, TypeInfo], schema: Schema, *,
                 commit_lsn: int, commit_ts_us: int, table: str | None = None) -> None:
        self.rel = rel
        self.table = table or f"{rel.schema}.{rel.name}"
        self.schema = schema
        self.commit_lsn = int(commit_lsn)
        self.commit_ts_us = int(commit_ts_us)
        self.file_schema: pa.Schema = schema_to_pyarrow(schema, include_field_ids=True)
        fields = mirror_fields(schema, self.table)
        layouts = LayoutCache(types)
        live = layouts.get(rel).live
        #: the columns COPY selects, in attnum order
        self.selected: tuple[LiveColumn, ...] = tuple(
            lc for lc in live if lc.column.generated != _VIRTUAL)
        by_attnum = {lc.column.attnum: i for i, lc in enumerate(self.selected)}
        for lc in live:
            f = fields.get(lc.column.attnum)
            if f is None:
                raise LakeError(
                    f"mirror of {self.table}: no column for {lc.column.name} (attnum "
                    f"{lc.column.attnum}); evolve the mirror to the relation version first")
            stream_type = iceberg_type(lc.codec.arrow_type, table=self.table,
                                       column=lc.column.name)
            if promoted(f.field_type, stream_type) != f.field_type:
                raise LakeError(
                    f"mirror of {self.table}: column {f.name} ({f.field_type}) cannot hold "
                    f"the values of {lc.column.name} (attnum {lc.column.attnum}, "
                    f"{stream_type} in the change stream); evolve the mirror first")
        #: per file field: ("data", selected index) / ("null", None) / a system column
        self._plan: list[tuple[str, int | None]] = []
        data_names = {f.name: a for a, f in fields.items()}
        for f in schema.fields:
            attnum = data_names.get(f.name)
            if attnum is not None:
                idx = by_attnum.get(attnum)
                self._plan.append(("null", None) if idx is None else ("data", idx))
            elif f.name in (CDC_COMMIT_LSN, CDC_COMMIT_TS, CDC_PG_TEXT):
                self._plan.append((f.name, None))
            else:
                raise LakeError(f"mirror of {self.table}: column {f.name} is neither a data "
                                "column nor a system column cdclake writes")
        self._mirror_types = [arrow_type(f.field_type) for f in schema.fields]

    # -- SQL ---------------------------------------------------------------------------------

    def qualified(self) -> str:
        return f"{quote_ident(self.rel.schema)}.{quote_ident(self.rel.name)}"

    def select_list(self) -> str:
        """The columns COPY selects (virtual generated ones left out), quoted, attnum order.

        A relation without any selectable column gives ``NULL``: COPY then still prints one
        line per row, and the rows (all system values) are counted as they must be."""
        if not self.selected:
            return "NULL"
        return ", ".join(quote_ident(lc.column.name) for lc in self.selected)

    def copy_statement(self, first_block: int = 0, end_block: int | None = None) -> str:
        """``COPY (SELECT ... FROM ONLY t WHERE ctid in [first_block, end_block)) TO STDOUT``:
        a TID range scan (PostgreSQL 14+) over the chunk's heap blocks."""
        first = int(first_block)
        if first < 0 or (end_block is not None and int(end_block) < first):
            raise LakeError(f"{self.table}: bad block range {first_block}..{end_block}")
        where = f"ctid >= '({first},0)'::tid"
        if end_block is not None:
            where += f" AND ctid < '({int(end_block)},0)'::tid"
        return (f"COPY (SELECT {self.select_list()} FROM ONLY {self.qualified()} "
                f"WHERE {where}) TO STDOUT")

    # -- rows --------------------------------------------------------------------------------

    def to_arrow(self, rows: Sequence[Sequence[str | None]]) -> pa.Table:
        """The rows (COPY text values, None for NULL, in :meth:`select_list` order) laid out
        in :attr:`file_schema`."""
        n = len(rows)
        width = len(self.selected) or 1
        for row in rows:
            if len(row) != width:
                raise LakeError(f"{self.table}: a COPY row has {len(row)} values where "
                                f"{width} columns were selected")
        texts_by_column = list(zip(*rows, strict=True)) if n and self.selected else \
            [()] * len(self.selected)
        texts: list[dict[str, str] | None] = [None] * n
        typed = [self._column(lc, list(col), texts)
                 for lc, col in zip(self.selected, texts_by_column, strict=True)]
        arrays = []
        for (kind, idx), f, mtype in zip(self._plan, self.file_schema, self._mirror_types,
                                         strict=True):
            if kind == "data":
                assert idx is not None
                arr = self._cast(typed[idx], mtype, self.selected[idx])
            elif kind == "null":
                arr = pa.nulls(n, mtype)
            elif kind == CDC_COMMIT_LSN:
                arr = pa.repeat(pa.scalar(self.commit_lsn, mtype), n)
            elif kind == CDC_COMMIT_TS:
                arr = pa.repeat(pa.scalar(self.commit_ts_us, mtype), n)
            else:
                arr = pa.array(texts, type=_PG_TEXT_TYPE)
            arrays.append(_to_file_type(arr, f.type))
        if n and any(texts) and CDC_PG_TEXT not in self.file_schema.names:
            raise LakeError(f"mirror of {self.table}: values without a typed representation "
                            f"need the {CDC_PG_TEXT} column, which the table lacks")
        return pa.Table.from_arrays(arrays, schema=self.file_schema)

    def _column(self, lc: LiveColumn, col: list[str | None],
                texts: list[dict[str, str] | None]) -> pa.Array:
        """One column's values in the change stream's Arrow type (the codec's)."""
        parse = lc.codec.value_from_text
        try:
            values: list[Any] = [None if s is None else parse(s) for s in col]
        except NotTypeable:  # rare: redo this column value by value
            values = []
            key = str(lc.column.attnum)
            for i, s in enumerate(col):
                if s is None:
                    values.append(None)
                    continue
                try:
                    values.append(parse(s))
                except NotTypeable:
                    values.append(None)
                    row = texts[i]
                    if row is None:
                        row = texts[i] = {}
                    row[key] = s
        try:
            return pa.array(values, type=lc.codec.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise LakeError(f"{self.table}: values of column {lc.column.name} do not fit "
                            f"the change stream's type {lc.codec.arrow_type}: {exc}") from exc

    def _cast(self, arr: pa.Array, target: pa.DataType, lc: LiveColumn) -> pa.Array:
        if arr.type == target:
            return arr
        try:
            return pc.cast(arr, target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise LakeError(f"mirror of {self.table}: column {lc.column.name} "
                            f"({arr.type} in the change stream) cannot be stored as {target} "
                            f"without loss: {exc}") from exc


def _to_file_type(arr: pa.Array, file_type: pa.DataType) -> pa.Array:
    """The mirror's Arrow type -> pyiceberg's file layout of it (large strings and lists,
    the uuid extension): a change of representation, never of value."""
    if arr.type == file_type:
        return arr
    return arr.cast(file_type, safe=True)


def counts_only_columns(table: pa.Table) -> list[str]:
    """Top-level columns holding a value pyiceberg cannot turn into a bound (BC dates, years
    past 9999, ±infinity): the driver sets ``write.metadata.metrics.column.<name>=counts``
    for them before building DataFiles (see :mod:`cdclake.lake.metrics`)."""
    return [name for name in table.column_names if needs_counts_only(table.column(name))]
