"""Which columns of a Parquet file cdclake writes get dictionary encoding.

Parquet writers dictionary-encode every column by default and fall back to plain encoding
once a column chunk's dictionary page is full — after hashing every value up to there, in
every row group. Most of what cdclake writes is unique per row (keys, LSNs, md5s, uuids,
timestamps), where that work buys nothing and the fallback leaves larger files than plain
encoding: a 20-column table of 250,000 rows wrote in 0.29 s and 25 MB (zstd) with every
column dictionary-encoded, 0.17 s and 18 MB with only its repetitive columns
(bench/snapshot.py's wide table). The encoding never changes a value.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: rows of the first batch looked at
SAMPLE_ROWS = 8192
#: a column is dictionary-encoded when its sample has at most this share of distinct values
MAX_DISTINCT_SHARE = 0.5


def dictionary_columns(table: pa.Table | pa.RecordBatch) -> list[str]:
    """The top-level columns worth a dictionary, judged by the first :data:`SAMPLE_ROWS` rows
    of ``table``: those with few distinct values (``use_dictionary=`` of a Parquet writer).
    Nested and boolean columns are left plain (a boolean has no dictionary encoding)."""
    sample = table.slice(0, SAMPLE_ROWS)
    rows = sample.num_rows
    if not rows:
        return []
    return [name for name, column in zip(sample.column_names, sample.columns, strict=True)
            if _repetitive(column, rows)]


def write_table(table: pa.Table, where: Any) -> None:
    """``table`` as one Parquet file at ``where`` (a writable stream), its repetitive columns
    dictionary-encoded: a stream part, as a local decode and the Spark writer both write it."""
    pq.write_table(table, where, use_dictionary=dictionary_columns(table))


def _repetitive(column: pa.Array | pa.ChunkedArray, rows: int) -> bool:
    t = column.type
    if pa.types.is_nested(t) or pa.types.is_boolean(t) or isinstance(t, pa.ExtensionType):
        return False
    try:
        distinct = pc.count_distinct(column, mode="all").as_py()
    except pa.ArrowNotImplementedError:  # a type without a hash kernel: plain it is
        return False
    return bool(distinct <= MAX_DISTINCT_SHARE * rows)
