"""The change Parquet of a batch as Spark reads it: the executors' side of the Spark merge.

A module of its own, importing pyarrow only: the task body Spark sends (:func:`read_parts`)
is pickled by reference to the functions it calls, so an executor's Python worker imports
this module, not the merge's (:mod:`cdclake.lake.sparkmerge` and its pyiceberg and catalog
imports: half a second, paid by every worker of every merge).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs


def spark_ready(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark takes for a change-stream type: uuid (16-byte fixed binary) as
    its text, which is how Iceberg's Spark runtime holds a uuid column."""
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(spark_ready(f.type)) for f in t])
    return t


def ready_column(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.Array:
    """``col`` as :func:`spark_ready` typed it (``t``): uuids as their text."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.type == t:
        return arr
    if pa.types.is_struct(arr.type):
        children = [ready_column(arr.field(i), t.field(i).type)
                    for i in range(arr.type.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
    return pa.array([None if b is None else str(uuid.UUID(bytes=b)) for b in arr.to_pylist()],
                    pa.string())


def read_parts(filesystem: pafs.FileSystem, schema: pa.Schema
               ) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """mapInArrow body: each input row names a Parquet part; yield its rows as ``schema``."""
    def read(paths: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for names in paths:
            for path in names.column(0).to_pylist():
                part = pq.read_table(path, filesystem=filesystem)
                arrays = [ready_column(part.column(f.name), f.type) for f in schema]
                yield from pa.Table.from_arrays(arrays, schema=schema).to_batches()
    return read
