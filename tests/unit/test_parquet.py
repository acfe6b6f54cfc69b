"""cdclake.parquet: repetitive columns get a dictionary, the others are written plain — and the
file reads back the same either way."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from cdclake.parquet import SAMPLE_ROWS, dictionary_columns


def _table(rows: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "op": pa.array(["U" if i % 3 else "I" for i in range(rows)]),
        "md5": pa.array([f"{i * 2654435761 % 2**32:08x}" for i in range(rows)]),
        "flag": pa.array([i % 2 == 0 for i in range(rows)]),
        "tags": pa.array([[i % 4] for i in range(rows)], pa.list_(pa.int32())),
        "gone": pa.nulls(rows, pa.string()),
    })


def test_only_columns_with_few_distinct_values_get_a_dictionary() -> None:
    assert dictionary_columns(_table(1000)) == ["op", "gone"]


def test_the_choice_looks_at_the_first_rows_only() -> None:
    table = _table(SAMPLE_ROWS + 10)
    # past the sample, "op" turns unique: still chosen by what the sample holds
    op = table.column("op").to_pylist()[:SAMPLE_ROWS] + [f"x{i}" for i in range(10)]
    table = table.set_column(1, "op", pa.array(op))
    assert "op" in dictionary_columns(table)


def test_an_empty_table_has_no_dictionary_column() -> None:
    assert dictionary_columns(_table(0)) == []


def test_the_file_reads_back_the_same_values() -> None:
    table = _table(5000)
    sink = io.BytesIO()
    pq.write_table(table, sink, use_dictionary=dictionary_columns(table))
    sink.seek(0)
    meta = pq.ParquetFile(sink).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings
                 for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["op"]
    assert "RLE_DICTIONARY" not in encodings["md5"]
    sink.seek(0)
    assert pq.read_table(sink).equals(table)
