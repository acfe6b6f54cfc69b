"""The lake side of an initial snapshot, without a server: the mirror staged, files written by
the copy's converter, one commit replacing the old rows, stale files of a died run removed,
and the merge after it skipping exactly what the snapshot saw."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow import fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow

from cdclake.catalog.model import Column, RelationVersion
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import column_fields
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import LakeError
from cdclake.lake import inexact, quarantine
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from cdclake.lake.visibility import PROPERTY, SnapshotFacts, facts_of
from cdclake.lake.watermark import committed_lsn
from cdclake.snapshot.copyrows import CopyRows
from cdclake.snapshot.mirror import DIRECTORY_PREFIX, MirrorSnapshot, open_mirror
from tests.support.duck import rows as duck_rows
from tests.support.streamgen import Stream, relation
from tests.unit.tuples.builtin_types import BUILTIN

REL = RelationVersion(
    oid=16600, db_oid=5, tablespace=1663, relfilenode=16600, schema="public", name="acct",
    qualified="public.acct", relkind="r", persistence="p", replident="d",
    columns=tuple(Column(attnum=a, name=n, quoted=n, type_oid=t, typmod=-1,
                         attlen=BUILTIN[t].typlen, attalign=BUILTIN[t].typalign,
                         attbyval=BUILTIN[t].typbyval)
                  for a, n, t in ((1, "id", 23), (2, "owner", 25))),
    key_attnums=(1,), valid_from=0x3000)


def facts(run: str, xip: tuple[int, ...] = (105,)) -> SnapshotFacts:
    return SnapshotFacts("00000003-00000002-1", 0x3000, 0x3100, 100, 110, xip, 0, run)


def _copy(m: MirrorSnapshot, index: int, rows: list[tuple[str | None, ...]]) -> str:
    conv = CopyRows(REL, BUILTIN, m.schema, commit_lsn=0x3000, commit_ts_us=0)
    path = m.file_location(index)
    local = path.removeprefix("file://")
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(conv.to_arrow(rows), local)
    return path


def _open(catalog: Catalog, config: Config, run: str) -> MirrorSnapshot:
    fields = column_fields(LayoutCache(BUILTIN).get(REL), BUILTIN)
    return open_mirror(catalog, config, REL, fields, run)


def test_snapshot_replaces_the_mirror_in_one_commit(catalog: Catalog, config: Config) -> None:
    first = _open(catalog, config, "run1")
    paths = [_copy(first, 0, [("1", "a"), ("2", "b")]), _copy(first, 1, [])]
    first.commit(paths, [], facts("run1"), config.stream)
    table = catalog.load_table(first.table.name())
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    assert facts_of(table.properties, "public.acct") == facts("run1")
    assert committed_lsn(table, config.stream) == 0  # the merge considers every change

    # marks the merge left on the mirror: a new copy of every row ends them
    marks = {quarantine.PROPERTY: '{"reason": "r"}', inexact.PROPERTY: '{"not_applied": 2}'}
    table.transaction().set_properties(marks).commit_transaction()
    again = _open(catalog, config, "run2")
    again.commit([_copy(again, 0, [("3", "c")])], [], facts("run2", ()), config.stream)
    table = catalog.load_table(first.table.name())
    assert table.scan().to_arrow().column("owner").to_pylist() == ["c"]
    history = [s.summary.operation.value for s in table.snapshots()]
    assert history[-1] == "overwrite" and len(history) == 2, history  # one commit each
    assert facts_of(table.properties, "public.acct") == facts("run2", ())
    assert not set(marks) & set(table.properties), table.properties


def test_a_snapshot_taken_again_after_a_type_change_replaces_the_column(
        catalog: Catalog, config: Config) -> None:
    """``cdclake snapshot --tables`` after ALTER owner TYPE int: every stored row goes, so
    the column of the old type is replaced by one of the new type (a new field id), in the
    snapshot's commit."""
    first = _open(catalog, config, "run1")
    first.commit([_copy(first, 0, [("1", "a")])], [], facts("run1"), config.stream)
    owner = catalog.load_table(first.table.name()).schema().find_field("owner")
    int_owner = dataclasses.replace(REL, columns=(REL.columns[0], dataclasses.replace(
        REL.columns[1], type_oid=23, attlen=4, attalign="i", attbyval=True)))
    fields = column_fields(LayoutCache(BUILTIN).get(int_owner), BUILTIN)
    again = open_mirror(catalog, config, int_owner, fields, "run2")
    conv = CopyRows(int_owner, BUILTIN, again.schema, commit_lsn=0x3000, commit_ts_us=0)
    path = again.file_location(0)
    Path(path.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(conv.to_arrow([("1", "42")]), path.removeprefix("file://"))
    again.commit([path], [], facts("run2"), config.stream)
    table = catalog.load_table(first.table.name())
    replaced = table.schema().find_field("owner")
    assert (str(replaced.field_type), replaced.doc) == ("int", owner.doc)
    assert replaced.field_id != owner.field_id
    assert table.scan().to_arrow().column("owner").to_pylist() == [42]


def _data(m: MirrorSnapshot) -> str:
    return f"{m.table.location().removeprefix('file://')}/data"


def _dir(m: MirrorSnapshot) -> str:
    return Path(m.directory).name


def test_files_of_a_snapshot_that_can_no_longer_commit_are_removed(catalog: Catalog,
                                                                   config: Config) -> None:
    done = _open(catalog, config, "done")
    done.commit([_copy(done, 0, [("1", "a")])], [], facts("done"), config.stream)
    died = _open(catalog, config, "died")
    _copy(died, 0, [("9", "lost")])  # written, never committed
    again = _open(catalog, config, "again")  # the mirror moves past died's snapshot
    again.commit([_copy(again, 0, [("2", "b")])], [], facts("again"), config.stream)
    retry = _open(catalog, config, "retry")
    removed = retry.remove_stale(pafs.LocalFileSystem(), _data(retry))
    assert sorted(Path(p).name for p in removed) == sorted([_dir(done), _dir(died)])
    left = sorted(p.name for p in Path(_data(retry)).iterdir())
    assert left == [_dir(again)]  # the committed snapshot's files stay
    assert _dir(again).startswith(f"{DIRECTORY_PREFIX}again-on-")
    assert PROPERTY in catalog.load_table(done.table.name()).properties


def test_files_of_a_snapshot_that_can_still_commit_are_kept(catalog: Catalog,
                                                            config: Config) -> None:
    """A snapshot run that lost the lake lease and goes on (it stalled) can still commit while
    the mirror stays on the snapshot it staged on: a newer run must not remove its files, or
    the mirror would point at files that are gone."""
    done = _open(catalog, config, "done")
    done.commit([_copy(done, 0, [("1", "a")])], [], facts("done"), config.stream)
    stalled = _open(catalog, config, "stalled")
    paths = [_copy(stalled, 0, [("5", "e")])]
    newer = _open(catalog, config, "newer")  # took the lease over, staged on the same snapshot
    assert newer.remove_stale(pafs.LocalFileSystem(), _data(newer)) == []
    stalled.commit(paths, [], facts("stalled"), config.stream)  # it wakes and commits
    table = catalog.load_table(done.table.name())
    assert table.scan().to_arrow().column("id").to_pylist() == [5]
    with pytest.raises(LakeError, match="another writer committed to its mirror"):
        newer.commit([_copy(newer, 0, [("6", "f")])], [], facts("newer"), config.stream)
    # now the newer run's files can never be committed: the next look removes them
    last = _open(catalog, config, "last")
    removed = last.remove_stale(pafs.LocalFileSystem(), _data(last))
    assert sorted(Path(p).name for p in removed) == sorted([_dir(done), _dir(newer)])
    assert table.scan().to_arrow().column("id").to_pylist() == [5]


def test_the_merge_skips_exactly_what_the_snapshot_saw(catalog: Catalog, config: Config,
                                                       stream: Stream, duck: Any) -> None:
    rel = relation("items", [("id", pa.int32()), ("name", pa.string())], key=["id"])
    m = open_mirror(catalog, config, rel.version,
                    [pa.field(n, t) for n, t in rel.types.items()], "run")
    epoch = 5 << 32
    # 701 committed before the snapshot; 702 was running in it; 703 began after it
    seen = SnapshotFacts("id", 0x0100_0000, 0x0100_0200, epoch + 702, epoch + 703,
                         (epoch + 702,), 0, "run")
    path = m.file_location(0)
    Path(path.removeprefix("file://")).parent.mkdir(parents=True)
    schema = schema_to_pyarrow(m.schema, include_field_ids=True)
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"], "_cdc_commit_lsn": [0, 0],
                             "_cdc_commit_ts": [0, 0], "_cdc_pg_text": [None, None]}
                            ).cast(schema), path.removeprefix("file://"))
    m.commit([path], [], seen, config.stream)
    b = stream.batch("b1")
    with b.txn() as t:  # 701: its insert is in the copy already
        t.insert(rel, {"id": 1, "name": "a"})
    with b.txn() as t:  # 702: committed before end_lsn but not visible: applied
        t.update(rel, {"id": 2, "name": "b2"})
    with b.txn() as t:  # 703
        t.insert(rel, {"id": 3, "name": "c"})
    b.write()
    report = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    (r,) = report.tables
    assert (r.skipped_snapshot, r.inserted, r.updated, r.not_found) == (1, 1, 1, 0)
    table = catalog.load_table(m.table.name())
    assert duck_rows(table, ["id", "name"], duck) == [{"id": 1, "name": "a"},
                                                    {"id": 2, "name": "b2"},
                                                    {"id": 3, "name": "c"}]


def test_the_merge_after_a_snapshot_taken_past_a_type_change(catalog: Catalog, config: Config,
                                                              stream: Stream, duck: Any) -> None:
    """The first run's snapshot was taken after ALTER name TYPE int: the mirror has the int
    column, and the batch still holds the text rows and the rewrite the snapshot saw. Those
    are skipped, and what comes after applies on the int column."""
    rel = relation("items", [("id", pa.int32()), ("name", pa.string())], key=["id"])
    retyped = rel.evolve(0x0100_0100, retype={"name": pa.int32()})
    m = open_mirror(catalog, config, retyped.version,
                    [pa.field(n, t) for n, t in retyped.types.items()], "run")
    epoch = 5 << 32
    # 701 and 702 (the ALTER) committed before the snapshot, 703 after
    seen = SnapshotFacts("id", 0x0100_0000, 0x0100_0200, epoch + 703, epoch + 703, (), 0, "run")
    path = m.file_location(0)
    Path(path.removeprefix("file://")).parent.mkdir(parents=True)
    schema = schema_to_pyarrow(m.schema, include_field_ids=True)
    pq.write_table(pa.table({"id": [1], "name": [7], "_cdc_commit_lsn": [0],
                             "_cdc_commit_ts": [0], "_cdc_pg_text": [None]}
                            ).cast(schema), path.removeprefix("file://"))
    m.commit([path], [], seen, config.stream)
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "name": "7"})
    with b.txn() as t:
        t.rewrite(retyped, [{"id": 1, "name": 7}])
    with b.txn() as t:
        t.insert(retyped, {"id": 2, "name": 8})
    b.write()
    report = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    (r,) = report.tables
    assert (r.skipped_snapshot, r.inserted, r.schema_changes) == (3, 1, [])
    table = catalog.load_table(m.table.name())
    assert duck_rows(table, ["id", "name"], duck) == [{"id": 1, "name": 7}, {"id": 2, "name": 8}]
