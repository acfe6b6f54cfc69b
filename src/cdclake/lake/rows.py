"""Mirror rows between Iceberg's Arrow tables and the attnum-keyed rows of the merge core."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.schema import Schema

from cdclake.errors import LakeError
from cdclake.lake.apply import Row, column_value
from cdclake.lake.schema import CDC_COMMIT_LSN, CDC_COMMIT_TS, arrow_type, mirror_fields


def plain_values(column: pa.ChunkedArray) -> list[Any]:
    """Python values, with extension types (pyiceberg reads uuid as arrow.uuid) reduced to
    their storage so values compare equal to the change stream's."""
    if isinstance(column.type, pa.BaseExtensionType):
        column = pa.chunked_array([c.storage for c in column.chunks],
                                  type=column.type.storage_type)
    return column.to_pylist()


def rows_from_arrow(data: pa.Table, schema: Schema, table: str) -> list[Row]:
    """Mirror rows as read by a scan of a table with ``schema``."""
    fields = mirror_fields(schema, table)
    columns = [(attnum, plain_values(data.column(f.name))) for attnum, f in fields.items()]
    lsns = data.column(CDC_COMMIT_LSN).to_pylist()
    tss = data.column(CDC_COMMIT_TS).to_pylist()
    return [Row({a: values[i] for a, values in columns}, lsns[i], tss[i])
            for i in range(data.num_rows)]


def rows_to_arrow(rows: Sequence[Row], schema: Schema, defaults: Mapping[int, Any],
                  table: str) -> pa.Table:
    """Rows laid out in ``schema`` (the mirror's schema after evolution)."""
    fields = mirror_fields(schema, table)
    by_name = {f.name: a for a, f in fields.items()}
    arrays = []
    for f in schema.fields:
        if f.name == CDC_COMMIT_LSN:
            values: list[Any] = [r.commit_lsn for r in rows]
        elif f.name == CDC_COMMIT_TS:
            values = [r.commit_ts for r in rows]
        else:
            attnum = by_name[f.name]
            values = [column_value(r.values, attnum, defaults, table) for r in rows]
        try:
            arrays.append(pa.array(values, type=arrow_type(f.field_type)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise LakeError(f"table {table}: column {f.name} ({f.field_type}) cannot hold the "
                            f"values of the change stream: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=pa.schema(
        [pa.field(f.name, arrow_type(f.field_type), nullable=not f.required)
         for f in schema.fields]))
