"""The lake side of an initial snapshot, without a server: the mirror staged, files written by
the copy's converter, one commit replacing the old rows, stale files of a died run removed,
and the merge after it skipping exactly what the snapshot saw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow

from cdclake.catalog.model import Column, RelationVersion
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import column_fields
from cdclake.decoding.rows import LayoutCache
from cdclake.lake.batch import read_batch
from cdclake.lake.copyrows import CopyRows
from cdclake.lake.merge import merge_batch
from cdclake.lake.snapshot import DIRECTORY_PREFIX, MirrorSnapshot, open_mirror
from cdclake.lake.visibility import PROPERTY, SnapshotFacts, facts_of
from cdclake.lake.watermark import committed_lsn
from tests.e2e.lake.duck import rows as duck_rows
from tests.unit.lake.streamgen import Stream, relation
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

    again = _open(catalog, config, "run2")
    again.commit([_copy(again, 0, [("3", "c")])], [], facts("run2", ()), config.stream)
    table = catalog.load_table(first.table.name())
    assert table.scan().to_arrow().column("owner").to_pylist() == ["c"]
    history = [s.summary.operation.value for s in table.snapshots()]
    assert history[-1] == "overwrite" and len(history) == 2, history  # one commit each
    assert facts_of(table.properties, "public.acct") == facts("run2", ())


def test_files_of_a_snapshot_that_never_committed_are_removed(catalog: Catalog,
                                                              config: Config) -> None:
    done = _open(catalog, config, "done")
    done.commit([_copy(done, 0, [("1", "a")])], [], facts("done"), config.stream)
    died = _open(catalog, config, "died")
    _copy(died, 0, [("9", "lost")])  # written, never committed
    retry = _open(catalog, config, "retry")
    root = f"{retry.table.location().removeprefix('file://')}/data"
    removed = retry.remove_stale(pafs.LocalFileSystem(), root)
    assert [Path(p).name for p in removed] == [f"{DIRECTORY_PREFIX}died"]
    left = sorted(p.name for p in Path(root).iterdir())
    assert left == [f"{DIRECTORY_PREFIX}done"]  # the committed snapshot's files stay
    assert PROPERTY in catalog.load_table(done.table.name()).properties


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
