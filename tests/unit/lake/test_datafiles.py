"""DataFiles reads what pyiceberg's ArrowScan reads — evolved schemas, row filters, position
deletes — but a record batch at a time."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, GreaterThan
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import FileScanTask, Table
from pyiceberg.types import LongType

from cdclake.lake import datafiles
from cdclake.lake.datafiles import DataFiles


@pytest.fixture
def evolved(catalog: Catalog) -> Table:
    """Two files: one of 200,000 rows before a column was renamed and one added, one of
    three rows after."""
    catalog.create_namespace_if_not_exists("t")
    table = catalog.create_table("t.rows", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    table.append(pa.table({"id": pa.array(range(200_000), pa.int64()),
                           "v": [f"v{i}" for i in range(200_000)]}))
    with table.update_schema() as update:
        update.rename_column("v", "label")
        update.add_column("n", LongType())
    table.append(pa.table({"id": pa.array([-1, -2, -3], pa.int64()), "label": ["a", "b", "c"],
                           "n": pa.array([1, None, 3], pa.int64())}))
    return table


def _both(table: Table, row_filter: object = None) -> tuple[pa.Table, pa.Table, int]:
    """The table read by DataFiles and by ArrowScan, and DataFiles' batch count."""
    scan = table.scan(row_filter=row_filter) if row_filter is not None else table.scan()
    ours = DataFiles(scan.table_metadata, scan.io, scan.projection(), scan.row_filter)
    batches = [b for task in scan.plan_files() for b in ours.batches(task)]
    theirs = ArrowScan(scan.table_metadata, scan.io, scan.projection(), scan.row_filter
                       ).to_table(scan.plan_files())
    return pa.Table.from_batches(batches), theirs, len(batches)


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def test_an_evolved_table_is_read_as_pyiceberg_reads_it_a_batch_at_a_time(
        evolved: Table) -> None:
    ours, theirs, batches = _both(evolved)
    assert ours.column_names == ["id", "label", "n"] == theirs.column_names
    assert _sorted(ours).equals(_sorted(theirs))
    assert ours.num_rows == 200_003
    assert ours.column("n").null_count == 200_001  # the old file lacks it: null
    assert batches >= -(-200_000 // datafiles.BATCH_ROWS) + 1  # streamed, not a file whole


def test_a_row_filter_keeps_what_pyiceberg_keeps(evolved: Table) -> None:
    ours, theirs, _ = _both(evolved, GreaterThan("id", 199_990))
    assert _sorted(ours).equals(_sorted(theirs))
    assert ours.column("id").to_pylist() == list(range(199_991, 200_000))


def test_position_deletes_take_the_rows_they_name(evolved: Table, tmp_path: Path) -> None:
    """A delete file naming positions in the big file (across batch boundaries) and one
    past it: the rows at those positions go, the others stay, as ArrowScan has them."""
    task = next(t for t in evolved.scan().plan_files() if t.file.record_count == 200_000)
    positions = [0, 5, datafiles.BATCH_ROWS - 1, datafiles.BATCH_ROWS, 199_999]
    path = tmp_path / "deletes.parquet"
    pq.write_table(pa.table({"file_path": [task.file.file_path] * len(positions),
                             "pos": pa.array(positions, pa.int64())}), path)
    deletes = DataFile.from_args(content=DataFileContent.POSITION_DELETES,
                                 file_path=str(path), file_format=FileFormat.PARQUET,
                                 partition={}, record_count=len(positions),
                                 file_size_in_bytes=path.stat().st_size)
    deleted = FileScanTask(task.file, delete_files={deletes})
    metadata, io, schema = evolved.metadata, evolved.io, evolved.schema()
    ours = pa.Table.from_batches(DataFiles(metadata, io, schema).batches(deleted))
    theirs = ArrowScan(metadata, io, schema, AlwaysTrue()).to_table([deleted])
    assert ours.num_rows == 200_000 - len(positions)
    assert ours.equals(theirs)
    assert set(positions).isdisjoint(ours.column("id").to_pylist())
