"""A table's watermark: from its snapshots' summaries, else from the properties maintenance
writes before it expires them."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from cdclake.errors import LakeError
from cdclake.lake.watermark import committed_lsn, summary_properties, watermark_properties


def _table(catalog: Catalog) -> tuple[Table, pa.Table]:
    catalog.create_namespace_if_not_exists("cdc")
    data = pa.table({"id": pa.array([1], pa.int64())})
    table = catalog.create_table("cdc.t", schema=data.schema)
    return table, data


def test_the_newest_cdclake_summary_wins_over_other_snapshots(catalog: Catalog) -> None:
    table, data = _table(catalog)
    assert committed_lsn(table, "s") is None
    table.append(data, snapshot_properties=summary_properties("s", "b1", 100))
    table.append(data, snapshot_properties=summary_properties("s", "b2", 200))
    table.append(data)  # another tool's snapshot (a compaction) carries no watermark
    assert committed_lsn(table, "s") == 200


def test_without_a_summary_the_properties_keep_it(catalog: Catalog) -> None:
    table, data = _table(catalog)
    table.append(data)
    with table.transaction() as tx:
        tx.set_properties(watermark_properties("s", 300))
    assert committed_lsn(table, "s") == 300
    # a later cdclake commit is in the ancestry again: it is newer than the property
    table.append(data, snapshot_properties=summary_properties("s", "b4", 400))
    assert committed_lsn(table, "s") == 400
    with pytest.raises(LakeError, match="last written by cdclake stream 's', not 'other'"):
        committed_lsn(table, "other")


def test_properties_of_another_stream_are_refused(catalog: Catalog) -> None:
    table, data = _table(catalog)
    table.append(data)
    with table.transaction() as tx:
        tx.set_properties(watermark_properties("other", 5))
    with pytest.raises(LakeError, match="not 's'"):
        committed_lsn(table, "s")
