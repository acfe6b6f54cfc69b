"""Where the mirrors stand (``mirror_status``), reading them back (``mirror_chunks``), and merging
a selection of tables (``merge_batch(only=...)``), on a SQLite catalog in a temporary home."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from cdclake.lake.tables import KIND, MIRROR, STREAM, mirror_chunks, mirror_status
from cdclake.lake.visibility import PROPERTY, SnapshotFacts, property_value
from cdclake.lake.watermark import merged_end_lsn
from cdclake.lsn import format_lsn
from tests.support.streamgen import BatchBuilder, Stream
from tests.unit.lake.test_pending import items, owners


def batch(stream: Stream, name: str) -> BatchBuilder:
    b = stream.batch(name)
    with b.txn() as t:
        t.insert(items(), {"id": 1, "name": "a"})
        t.insert(items(), {"id": 2, "name": "b"})
        t.insert(owners(), {"id": 10, "email": "x@example.com"})
    b.write()
    return b


# -- mirror status -------------------------------------------------------------------------------


def test_no_namespace_no_mirrors_and_nothing_created(catalog: Catalog, config: Config) -> None:
    assert mirror_status(config, catalog) == {}
    assert not catalog.namespace_exists(config.namespace)


def test_status_lists_this_streams_mirrors_only(catalog: Catalog, config: Config,
                                                stream: Stream) -> None:
    b = batch(stream, "b1")
    report = merge_batch(catalog, config, read_batch(stream.root, "b1"), changelog=True)
    assert report.changelogs  # a changelog table exists beside each mirror: not a mirror
    # another stream's mirror in the same namespace, and a table cdclake did not create
    catalog.create_table((config.namespace, "public__elsewhere"),
                         Schema(NestedField(1, "id", LongType())),
                         properties={STREAM: "other", KIND: MIRROR})
    catalog.create_table((config.namespace, "foreign"), Schema(NestedField(1, "id", LongType())))

    status = mirror_status(config, catalog)
    assert sorted(status) == ["public.items", "public.owners"]
    lsn = format_lsn(b.stream.lsn)  # the batch's last commit
    assert status["public.items"] == {"mirror": "cdc.public__items", "commit_lsn": lsn,
                                      "snapshot_id": status["public.items"]["snapshot_id"],
                                      "rows": 2, "initial_snapshot_lsn": None,
                                      "quarantined": None, "inexact": None}
    assert status["public.items"]["snapshot_id"] is not None
    assert status["public.owners"]["rows"] == 1
    assert list(mirror_status(config, catalog, ["public.owners"])) == ["public.owners"]
    assert mirror_status(config, catalog, []) == {}
    assert mirror_status(config.replace(stream="other"), catalog) == {
        "cdc.public__elsewhere": {"mirror": "cdc.public__elsewhere", "commit_lsn": None,
                                  "snapshot_id": None, "rows": 0,
                                  "initial_snapshot_lsn": None, "quarantined": None,
                                  "inexact": None}}


def test_status_shows_the_initial_snapshot_lsn(catalog: Catalog, config: Config,
                                               stream: Stream) -> None:
    batch(stream, "b1")
    merge_batch(catalog, config, read_batch(stream.root, "b1"))
    facts = SnapshotFacts("00000003-1", 0x3000000, 0x3000100, 700, 705, (702,), 0)
    table = catalog.load_table((config.namespace, "public__items"))
    with table.transaction() as tx:
        tx.set_properties({PROPERTY: property_value(facts)})
    status = mirror_status(config, catalog)
    assert status["public.items"]["initial_snapshot_lsn"] == "0/3000000"
    assert status["public.owners"]["initial_snapshot_lsn"] is None


# -- reading mirrors back ------------------------------------------------------------------------


def read_mirrors(config: Config, catalog: Catalog, relations: dict[str, Any], **kw: Any
                 ) -> tuple[dict[str, pa.Table], list[str]]:
    """Every chunk of each mirror, concatenated again."""
    chunks, missing = mirror_chunks(config, catalog, relations, **kw)
    data: dict[str, list[pa.Table]] = {}
    for name, _rel, chunk in chunks:
        data.setdefault(name, []).append(chunk)
    return {k: pa.concat_tables(v) for k, v in data.items()}, missing


def test_mirror_chunks_returns_rows_and_the_tables_without_a_mirror(
        catalog: Catalog, config: Config, stream: Stream) -> None:
    batch(stream, "b1")
    merge_batch(catalog, config.replace(tables=["public.items"]),
                read_batch(stream.root, "b1"))
    relations = {"public.owners": owners().version, "public.items": items().version}
    data, missing = read_mirrors(config, catalog, relations)
    assert list(data) == ["public.items"] and missing == ["public.owners"]
    assert sorted(data["public.items"].column("id").to_pylist()) == [1, 2]
    assert read_mirrors(config, catalog, {}) == ({}, [])


def test_mirror_chunks_are_bounded_and_read_only_the_columns_asked_for(
        catalog: Catalog, config: Config, stream: Stream) -> None:
    batch(stream, "b1")
    merge_batch(catalog, config, read_batch(stream.root, "b1"))
    b2 = stream.batch("b2")
    with b2.txn() as t:
        for i in range(3, 8):
            t.insert(items(), {"id": i, "name": f"n{i}"})
    b2.write()
    merge_batch(catalog, config, read_batch(stream.root, "b2"))
    chunks, _ = mirror_chunks(config, catalog, {"public.items": items().version},
                              columns=lambda rel, schema: ["id", "nope"], max_rows=1)
    got = list(chunks)
    # one chunk per record batch the scan gives (at most max_rows unless a batch is larger)
    assert len(got) > 1 and all(c.column_names == ["id"] for _n, _r, c in got)
    assert sorted(i for _n, _r, c in got for i in c.column("id").to_pylist()) == list(range(1, 8))


def test_mirror_chunks_since_reads_what_the_run_wrote_and_rows_sharing_its_keys(
        catalog: Catalog, config: Config, stream: Stream) -> None:
    batch(stream, "b1")
    first = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    before = next(t.commit_lsn for t in first.tables if t.table == "public.items")
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.insert(items(), {"id": 3, "name": "c"})
    b2.write()
    merge_batch(catalog, config, read_batch(stream.root, "b2"))
    # a second row for key 3 the merge did not write (as a broken merge or writer would)
    table = catalog.load_table((config.namespace, "public__items"))
    stored = table.scan().to_arrow()
    dup = stored.filter(pc.equal(stored.column("id"), 3)).set_column(
        stored.schema.get_field_index("_cdc_commit_lsn"), "_cdc_commit_lsn",
        pa.array([1], pa.int64()))
    table.append(dup)
    relations = {"public.items": items().version, "public.owners": owners().version}

    data, _ = read_mirrors(config, catalog, relations,
                           since={"public.items": before, "public.owners": None})
    # key 3 twice (the check sees the duplicate), keys 1 and 2 from before the run not read
    assert sorted(data["public.items"].column("id").to_pylist()) == [3, 3]
    assert data["public.owners"].num_rows == 1  # None: read whole
    whole, _ = read_mirrors(config, catalog, relations)
    assert sorted(whole["public.items"].column("id").to_pylist()) == [1, 2, 3, 3]


# -- merging a selection -------------------------------------------------------------------------


def test_merging_only_some_tables_keeps_the_merged_end(catalog: Catalog, config: Config,
                                                       stream: Stream) -> None:
    batch(stream, "b1")
    report = merge_batch(catalog, config, read_batch(stream.root, "b1"), only=["public.owners"])
    assert [t.table for t in report.tables] == ["public.owners"]
    assert report.excluded == ["public.items"]
    assert report.previous_end_lsn is None and report.end_lsn is None
    assert merged_end_lsn(catalog, config.namespace, config.stream) is None
    # config.tables still applies to a selection
    narrowed = config.replace(tables=["public.owners"])
    report = merge_batch(catalog, narrowed, read_batch(stream.root, "b1"), only=["public.items"])
    assert report.tables == [] and report.excluded == ["public.items", "public.owners"]


def test_a_selection_is_refused_past_a_missing_batch_too(catalog: Catalog, config: Config,
                                                         stream: Stream) -> None:
    for name in ("b0", "b1", "b2"):
        batch(stream, name)
    merge_batch(catalog, config, read_batch(stream.root, "b0"))
    with pytest.raises(LakeError, match=r"batch b2 starts at LSN .*a batch in between is "
                                        r"missing; merge it first \(nothing of b2 was applied\)"):
        merge_batch(catalog, config, read_batch(stream.root, "b2"), only=["public.items"])
    assert catalog.load_table((config.namespace, "public__items")).scan().to_arrow(
        ).num_rows == 2
