"""Mirror rows between Iceberg's Arrow tables and the attnum-keyed rows of the merge core.

Reading, a value the row's ``_cdc_pg_text`` map holds becomes a :class:`PgText` at its attnum
(its typed column is null); writing, the map is rebuilt from the row's values alone, so it
always describes exactly the values the row has now. Temporal values stay storage integers
both ways (:mod:`cdclake.lake.values`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema

from cdclake.errors import LakeError
from cdclake.lake.apply import Row, column_value
from cdclake.lake.schema import CDC_COMMIT_LSN, CDC_COMMIT_TS, CDC_PG_TEXT, mirror_fields
from cdclake.lake.typemap import arrow_type
from cdclake.lake.values import PgText, parse_texts, plain_values, split_texts, with_texts

__all__ = ["row_texts", "rows_from_arrow", "rows_to_arrow"]


def row_texts(data: pa.Table, attnums: Sequence[int], where: str) -> list[dict[int, str]] | None:
    """Each row's ``_cdc_pg_text`` as attnum -> text (None when the table has no such column:
    a mirror written before cdclake kept exact text)."""
    if CDC_PG_TEXT not in data.column_names:
        return None
    return [parse_texts(entries, attnums, where, dropped_ok=True)
            for entries in data.column(CDC_PG_TEXT).to_pylist()]


def rows_from_arrow(data: pa.Table, schema: Schema, table: str) -> list[Row]:
    """Mirror rows as read by a scan of a table with ``schema``."""
    fields = mirror_fields(schema, table)
    columns = [(attnum, plain_values(data.column(f.name))) for attnum, f in fields.items()]
    lsns = data.column(CDC_COMMIT_LSN).to_pylist()
    tss = data.column(CDC_COMMIT_TS).to_pylist()
    texts = row_texts(data, list(fields), f"mirror of {table}")
    rows = []
    for i in range(data.num_rows):
        values = {a: values[i] for a, values in columns}
        if texts is not None and texts[i]:
            with_texts(values, texts[i])
        rows.append(Row(values, lsns[i], tss[i]))
    return rows


def rows_to_arrow(rows: Sequence[Row], schema: Schema, defaults: Mapping[int, Any],
                  table: str) -> pa.Table:
    """Rows laid out in ``schema`` (the mirror's schema after evolution)."""
    return table_of(schema, table, {
        CDC_COMMIT_LSN: [r.commit_lsn for r in rows],
        CDC_COMMIT_TS: [r.commit_ts for r in rows],
    }, [r.values for r in rows], defaults)


def table_of(schema: Schema, table: str, system: Mapping[str, list[Any]],
             rows: Sequence[Mapping[int, Any]], defaults: Mapping[int, Any]) -> pa.Table:
    """An Arrow table in ``schema``: system columns from ``system`` (by name), data columns
    from ``rows`` (attnum -> value, a PgText going to ``_cdc_pg_text``); a row's map is built
    from its values here and nowhere else."""
    by_name = {f.name: a for a, f in mirror_fields(schema, table).items()}
    texts: list[dict[str, str] | None] = [None] * len(rows)
    columns: dict[str, list[Any]] = {}
    for f in schema.fields:
        attnum = by_name.get(f.name)
        if attnum is None:
            continue
        values = [column_value(r, attnum, defaults, table) for r in rows]
        if PgText in set(map(type, values)):  # rare: one pass at C speed to find out
            values, column_texts = split_texts(values)
            for i, text in enumerate(column_texts):
                if text is not None:
                    row = texts[i]
                    if row is None:
                        row = texts[i] = {}
                    row[str(attnum)] = text
        columns[f.name] = values
    arrays = []
    for f in schema.fields:
        if f.name in columns:
            values = columns[f.name]
        elif f.name == CDC_PG_TEXT:
            values = texts  # type: ignore[assignment]
        elif f.name in system:
            values = system[f.name]
        else:
            raise LakeError(f"table {table}: column {f.name} is neither a data column nor a "
                            "system column cdclake writes")
        try:
            arrays.append(pa.array(values, type=arrow_type(f.field_type)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise LakeError(f"table {table}: column {f.name} ({f.field_type}) cannot hold the "
                            f"values of the change stream: {exc}") from exc
    if CDC_PG_TEXT not in {f.name for f in schema.fields} and any(texts):
        raise LakeError(f"table {table}: values without a typed representation need the "
                        f"{CDC_PG_TEXT} column, which the table lacks")
    return pa.Table.from_arrays(arrays, schema=pa.schema(
        [pa.field(f.name, arrow_type(f.field_type), nullable=not f.required)
         for f in schema.fields]))
