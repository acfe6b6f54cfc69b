"""The decoded batches in a local store (``lake.pending``) and the table selection the steps
and the merge share (``lake.batch.selected``): no Spark, no PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest

from cdclake.archive import Layout, open_store
from cdclake.catalog.model import IDENTITY_FULL, RelationVersion
from cdclake.config import Config
from cdclake.decoding import stream as contract
from cdclake.errors import LakeError
from cdclake.lake import pending as pending_module
from cdclake.lake.batch import Batch, combined, manifest_rows, selected, unselectable
from cdclake.lake.pending import (
    DecodedBatch,
    chunked,
    latest_relations,
    list_batches,
    open_batch,
    pending,
    stream_chunks,
)
from tests.support.streamgen import Rel, Stream, relation


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(home=tmp_path / "home", stream="test", store_url=(tmp_path / "store").as_uri())


@pytest.fixture
def stream(tmp_path: Path) -> Stream:
    """Batches land under the store's ``changes/`` prefix, as the decoder writes them."""
    return Stream(tmp_path / "store" / "changes")


def items() -> Rel:
    return relation("items", [("id", pa.int32()), ("name", pa.string())], key=["id"], oid=16401)


def owners() -> Rel:
    return relation("owners", [("id", pa.int32()), ("email", pa.string())], key=["id"],
                    oid=16402)


def two_batches(stream: Stream) -> None:
    i, o = items(), owners()
    b1 = stream.batch("b000001")
    with b1.txn() as t:
        t.insert(i, {"id": 1, "name": "a"})
        t.insert(i, {"id": 2, "name": "b"})
        t.insert(o, {"id": 10, "email": "x@example.com"})
    b1.write()
    b2 = stream.batch("b000002")
    with b2.txn() as t:
        t.update(i, {"id": 3, "name": "b"}, old={"id": 2})
        t.delete(o, {"id": 10})
        t.insert(o, {"id": 11, "email": "y@example.com"})
    b2.write()


def batches(config: Config) -> list[DecodedBatch]:
    return list_batches(open_store(config), Layout())


def first_batch(config: Config) -> Batch:
    return open_batch(config, open_store(config), Layout(), batches(config)[0])


# -- which batches there are, and which are pending --------------------------------------------


def test_pending_batches_are_the_complete_ones_past_the_merged_end(config: Config,
                                                                  stream: Stream) -> None:
    two_batches(stream)
    torn = stream.root / "b000003" / "public.items"  # a decode that died before its manifest
    torn.mkdir(parents=True)
    (torn / "part-00000.parquet").write_bytes(b"partial")
    found = batches(config)
    assert [b.name for b in found] == ["b000001", "b000002"]
    assert found[0].rows() == {"public.items": 2, "public.owners": 1}
    assert pending(found, None) == found
    assert pending(found, found[0].end_lsn) == found[1:]
    assert pending(found, found[1].end_lsn) == []


def test_batches_are_listed_in_stream_order_not_name_order(config: Config,
                                                           stream: Stream) -> None:
    for name in ("zz-first", "aa-second"):
        b = stream.batch(name)
        with b.txn() as t:
            t.insert(items(), {"id": 1, "name": name})
        b.write()
    found = batches(config)
    assert [b.name for b in found] == ["zz-first", "aa-second"]
    assert found[0].end_lsn <= found[1].start_lsn


def test_an_unreadable_manifest_names_the_batch(config: Config, stream: Stream) -> None:
    two_batches(stream)
    (stream.root / "b000002" / "_manifest.json").write_text(json.dumps({"batch": "b000002"}))
    with pytest.raises(LakeError, match=r"batch b000002: manifest .* is not valid .*"
                                        r"decode the batch again"):
        batches(config)


def test_manifest_rows_count_without_reading_parquet(config: Config, stream: Stream) -> None:
    two_batches(stream)
    second = batches(config)[1]
    assert manifest_rows(second.manifest) == {"public.items": 1, "public.owners": 2}
    assert manifest_rows({"tables": [{"table": "public.empty"}]}) == {"public.empty": 0}
    assert manifest_rows({}) == {}


def test_open_batch_reads_the_tables_where_the_store_keeps_them(config: Config,
                                                                stream: Stream) -> None:
    two_batches(stream)
    batch = first_batch(config)
    assert batch.name == "b000001"
    assert {t.table: t.rows for t in batch} == {"public.items": 2, "public.owners": 1}


# -- relations and the stream suite's input ------------------------------------------------------


def evolving_batches(stream: Stream) -> None:
    """b1: items (v0x1000) and owners inserted; b2: an items row updated under v0x1000, then
    one inserted under v0x2000 (a column added)."""
    old = items()
    new = old.evolve(0x2000, add=[("qty", pa.int64())])
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(old, {"id": 1, "name": "a"})
        t.insert(owners(), {"id": 1, "email": "e"})
    b1.write()
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(old, {"id": 1, "name": "b"}, old={"id": 1})
    with b2.txn() as t:
        t.insert(new, {"id": 2, "name": "c", "qty": 3})
    b2.write()


def test_latest_relations_take_the_newest_version_across_batches(config: Config,
                                                                 stream: Stream) -> None:
    evolving_batches(stream)
    store = open_store(config)
    every = latest_relations(config, store, Layout(), batches(config))
    assert {k: v.valid_from for k, v in every.items()} == {"public.items": 0x2000,
                                                          "public.owners": 0x1000}
    first = latest_relations(config, store, Layout(), batches(config)[:1])
    assert first["public.items"].valid_from == 0x1000


def test_combined_batches_are_one_batch_of_all_their_changes(config: Config,
                                                             stream: Stream) -> None:
    """What a merge of several batches at once reads: each table once, a relation version's
    parts one batch after the other, a newer version after them; the LSN range and commits of
    all of them, the parts read where the store keeps them."""
    evolving_batches(stream)
    store = open_store(config)
    parts = [open_batch(config, store, Layout(), d) for d in batches(config)]
    both = combined(parts)
    assert (both.name, both.start_lsn, both.end_lsn, both.commits) == (
        "b1..b2", parts[0].start_lsn, parts[1].end_lsn, 3)
    assert both.directory == parts[0].directory.rpartition("/")[0]
    assert [(e.table, [(v.relation.valid_from, v.rows) for v in e.versions])
            for e in both.entries] == [("public.items", [(0x1000, 2), (0x2000, 1)]),
                                       ("public.owners", [(0x1000, 1)])]
    assert [p.split("/")[0] for p in both.entries[0].versions[0].paths] == ["b1", "b2"]
    items_, owners_ = both
    assert [v.changes.column("name").to_pylist() for v in items_.versions] == [["a", "b"],
                                                                                ["c"]]
    assert owners_.versions[0].changes.column("email").to_pylist() == ["e"]
    assert combined(parts[:1]) is parts[0]


def stream_tables(batch: Batch, only: tuple[str, ...] = ()) -> tuple[
        dict[str, pa.Table], dict[str, object]]:
    """Each table's one chunk (every table here is far below a chunk's rows)."""
    tables: dict[str, pa.Table] = {}
    relations: dict[str, object] = {}
    for name, version, chunk in stream_chunks(batch, only):
        assert name not in tables, f"{name} came in more than one chunk"
        tables[name], relations[name] = chunk, version
    return tables, relations


def test_stream_tables_select_by_any_name_and_split_on_an_identity_change(
        config: Config, stream: Stream) -> None:
    keyed = items()
    full = keyed.evolve(0x2000, replident=IDENTITY_FULL)
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(keyed, {"id": 2, "name": "b"})
        t.insert(keyed, {"id": 1, "name": "a"})
    with b.txn() as t:
        t.insert(full, {"id": 3, "name": "c"})
        t.insert(owners(), {"id": 1, "email": "e"})
    b.write()
    batch = first_batch(config)

    tables, relations = stream_tables(batch, ("public.items",))
    assert sorted(tables) == ["public.items@v0000000000001000", "public.items@v0000000000002000"]
    assert relations["public.items@v0000000000002000"].replident == IDENTITY_FULL
    # the decoder's order is kept (the suite checks it): id 2 was written before id 1
    assert tables["public.items@v0000000000001000"].column("id").to_pylist() == [2, 1]

    tables, relations = stream_tables(batch)
    assert set(tables) == {"public.items@v0000000000001000", "public.items@v0000000000002000",
                           "public.owners"}
    assert tables["public.owners"].column(contract.OP).to_pylist() == [contract.OP_INSERT]


def test_a_renamed_table_answers_to_both_names(config: Config, stream: Stream) -> None:
    before = items()  # ALTER TABLE items RENAME TO goods, inside the batch
    after = Rel(dataclasses.replace(before.version, name="goods", qualified="public.goods",
                                    valid_from=0x2000), before.types)
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(before, {"id": 1, "name": "a"})
    with b.txn() as t:
        t.insert(after, {"id": 2, "name": "b"})
    b.write()
    batch = first_batch(config)
    (entry,) = batch.entries
    relations = [v.relation for v in entry.versions]
    assert selected(["public.items"], entry.table, relations)
    assert selected(["public.goods", "public.other"], entry.table, relations)
    assert not selected(["public.other"], entry.table, relations)
    assert not selected([], entry.table, relations)
    for name in ("public.items", "public.goods"):
        tables, _ = stream_tables(batch, (name,))
        assert tables["public.items"].num_rows == 2, name
    assert stream_tables(batch, ("public.other",)) == ({}, {})


def inserts(stream: Stream, rows: int, rows_per_part: int) -> Path:
    """A batch of ``rows`` one-row transactions into items, in files of ``rows_per_part``."""
    rel = items()
    b = stream.batch("b1")
    for i in range(rows):
        with b.txn() as t:
            t.insert(rel, {"id": i, "name": str(i)})
    return b.write(rows_per_part=rows_per_part)


def test_stream_chunks_are_whole_files_in_stream_order_and_bounded(
        config: Config, stream: Stream, monkeypatch: pytest.MonkeyPatch) -> None:
    inserts(stream, 10, rows_per_part=3)  # files of 3, 3, 3 and 1 rows
    batch = first_batch(config)
    chunks = list(stream_chunks(batch, max_rows=5))
    assert [(name, c.num_rows) for name, _, c in chunks] == [
        ("public.items", 3), ("public.items", 3), ("public.items", 4)]
    assert [i for _, _, c in chunks for i in c.column("id").to_pylist()] == list(range(10))
    # a file larger than a chunk is one chunk of its own, never split
    assert [c.num_rows for _, _, c in stream_chunks(batch, max_rows=2)] == [3, 3, 3, 1]
    assert [c.num_rows for _, _, c in stream_chunks(batch)] == [10]
    # four files, one contiguous chunk per column (GX's take over many chunks is slow)
    assert {col.num_chunks for _, _, c in stream_chunks(batch) for col in c.columns} == {1}
    # and by bytes: a part is never split, a chunk holds no more than CHUNK_BYTES beyond one
    monkeypatch.setattr(pending_module, "CHUNK_BYTES", 1)
    assert [c.num_rows for _, _, c in stream_chunks(batch)] == [3, 3, 3, 1]
    monkeypatch.undo()
    # only the columns asked for are read (a name the files lack is left out)
    ((_, _, narrow),) = stream_chunks(batch, columns=lambda rel: [contract.OP, "id", "nope"])
    assert narrow.column_names == [contract.OP, "id"]


def test_a_piece_whose_column_changed_type_starts_the_next_chunk() -> None:
    """Two batches checked together may hold two versions of one identity whose key column
    changed type (numeric -> text): no chunk can hold both, so the second starts a chunk; a
    column added in between joins (nulls fill it)."""
    old = pa.table({"k": pa.array([1, 2], pa.int64())})
    added = pa.table({"k": pa.array([3], pa.int64()), "note": pa.array(["x"])})
    changed = pa.table({"k": pa.array(["4"])})
    chunks = list(chunked([old, added, changed, changed], 100))
    assert [c.num_rows for c in chunks] == [3, 2]
    assert chunks[0].column("note").to_pylist() == [None, None, "x"]
    assert chunks[1].schema.field("k").type == pa.string()


def test_a_file_missing_rows_the_manifest_counts_stops_the_chunks(
        config: Config, stream: Stream) -> None:
    directory = inserts(stream, 4, rows_per_part=2)
    manifest = json.loads((directory / "_manifest.json").read_text())
    manifest["tables"][0]["versions"][0]["rows"] = 5
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(LakeError, match="manifest says 5 rows, files hold 4"):
        list(stream_chunks(first_batch(config), max_rows=2))


def _rel(oid: int, name: str, relkind: str = "r", parent: int = 0, valid_from: int = 0,
         **kw: object) -> RelationVersion:
    schema, table = name.split(".")
    return RelationVersion(oid=oid, db_oid=5, tablespace=1663,
                           relfilenode=0 if relkind == "p" else oid, schema=schema,
                           name=table, qualified=name, relkind=relkind, persistence="p",
                           replident="d", columns=(), parent_oid=parent,
                           valid_from=valid_from, **kw)  # type: ignore[arg-type]


#: a dictionary: orders (no changes needed to count), a measurements tree two levels deep
#: (a partitioned partition), a table renamed, one dropped, a view-like rewrite heap
DICTIONARY = [
    _rel(16400, "public.orders"),
    _rel(16401, "public.meas", "p"),
    _rel(16402, "public.meas_2024", parent=16401),
    _rel(16403, "public.meas_2025", "p", parent=16401),
    _rel(16404, "public.meas_2025_h1", parent=16403),
    _rel(16405, "public.meas_2025_h2", parent=16403),
    _rel(16406, "public.old_name"), _rel(16406, "public.new_name", valid_from=0x100),
    _rel(16407, "public.gone"), _rel(16407, "public.gone", valid_from=0x200, dropped=True),
    _rel(16408, "public.empty", "p"),
]


def test_names_that_select_nothing_are_named_and_the_rest_pass() -> None:
    assert unselectable(["public.orders", "public.meas_2024", "public.meas_2025_h1",
                         "public.old_name", "public.new_name", "public.gone"],
                        DICTIONARY) == []
    assert unselectable(["public.ordrs", "public.meas", "public.empty", "nope.nothing"],
                        DICTIONARY) == [
        "public.ordrs is not a table the stream's dictionary knows (did you mean "
        "public.orders?)",
        "public.meas is a partitioned table, whose rows are in its partitions: name those "
        "(public.meas_2024, public.meas_2025_h1, public.meas_2025_h2)",
        "public.empty is a partitioned table, whose rows are in its partitions: it has none "
        "yet",
        "nope.nothing is not a table the stream's dictionary knows"]
    # a table the source has now, created since the dictionary was written
    assert unselectable(["public.created_since"], DICTIONARY, ["public.created_since"]) == []
    # a partitioned table is one however the source lists it
    assert unselectable(["public.meas"], DICTIONARY, ["public.meas"]) != []
