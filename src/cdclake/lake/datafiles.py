"""A table's data files read a record batch at a time, in memory that does not grow with them.

pyiceberg's ``ArrowScan.to_record_batches`` gathers each file's batches in a list before it
yields the first (it reads files on a thread pool), and Arrow's dataset scanner under it
decodes whole row groups, several ahead: a data file of a million rows is in memory whole,
twice at worst. The mirror check reads every file a run wrote and the merge every file it
rewrites, so their peak grew with the files. Here Parquet's own batch reader streams a file
(:data:`BATCH_ROWS` rows at a time); what a file's columns mean — field ids, a column the
file lacks, position deletes, the row filter — is pyiceberg's, through its helpers. Files in
another format than Parquet go through ``ArrowScan``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind, extract_field_ids, translate_column_names
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    ArrowScan,
    _combine_positional_deletes,
    _get_column_projection_values,
    _read_all_delete_files,
    _to_requested_schema,
    expression_to_pyarrow,
    pyarrow_to_schema,
    schema_to_pyarrow,
)
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema, prune_columns
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import ListType, MapType

#: rows per record batch: a few MB of a wide table
BATCH_ROWS = 65_536


class DataFiles:
    """The rows of a table's data files (``projected``: the columns wanted, as the table's
    schema names them; ``row_filter``: the rows), a file at a time: :meth:`batches`."""

    def __init__(self, metadata: TableMetadata, io: FileIO, projected: Schema,
                 row_filter: BooleanExpression | None = None) -> None:
        self._metadata = metadata
        self._io = io
        self._projected = projected
        self._filter = bind(metadata.schema(), row_filter or AlwaysTrue(), case_sensitive=True)
        # as ArrowScan: maps and lists are read whole by their own id
        self._field_ids = {i for i in projected.field_ids
                           if not isinstance(projected.find_type(i), (MapType, ListType))
                           } | extract_field_ids(self._filter)
        self._other = ArrowScan(metadata, io, projected, row_filter or AlwaysTrue())

    def table(self, task: FileScanTask) -> pa.Table:
        """:meth:`batches` as one table (for a few columns: a file's keys)."""
        batches = list(self.batches(task))
        return pa.Table.from_batches(batches) if batches else schema_to_pyarrow(
            self._projected, include_field_ids=False).empty_table()

    def batches(self, task: FileScanTask) -> Iterator[pa.RecordBatch]:
        """The rows of ``task``'s data file, less its position deletes, that pass the filter,
        in the projected schema's types."""
        if task.file.file_format != FileFormat.PARQUET:
            yield from self._other.to_record_batches([task])
            return
        deletes = (_read_all_delete_files(self._io, [task]).get(task.file.file_path)
                   if task.delete_files else None)
        version = self._metadata.format_version
        with self._io.new_input(task.file.file_path).open() as source:
            parquet = pq.ParquetFile(source)
            in_file = pyarrow_to_schema(parquet.schema_arrow, self._metadata.name_mapping(),
                                        downcast_ns_timestamp_to_us=version <= 2,
                                        format_version=version)
            missing = _get_column_projection_values(
                task.file, self._projected, self._metadata.schema(),
                self._metadata.specs().get(task.file.spec_id), in_file.field_ids)
            keep = None
            if self._filter != AlwaysTrue():
                keep = expression_to_pyarrow(bind(in_file, translate_column_names(
                    self._filter, in_file, True, projected_field_values=missing), True), in_file)
            read = prune_columns(in_file, self._field_ids, select_full_types=False)
            start = 0
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS,
                                              columns=[c.name for c in read.columns]):
                rows = batch.num_rows
                if deletes:  # positions count the file's rows
                    batch = batch.take(_combine_positional_deletes(deletes, start, start + rows))
                start += rows
                if keep is not None:
                    batch = batch.filter(keep)
                if batch.num_rows:
                    yield _to_requested_schema(self._projected, read, batch,
                                               downcast_ns_timestamp_to_us=version <= 2,
                                               projected_missing_fields=missing,
                                               allow_timestamp_tz_mismatch=True)
