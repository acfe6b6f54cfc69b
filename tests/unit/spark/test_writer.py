"""Commit emit on executors: partitions' sorted runs merged into the stream's parts."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from cdclake.archive.local import LocalStore
from cdclake.decoding import stream
from cdclake.decoding.plugins.arrow import part_path
from cdclake.spark.writer import RunParts, merge_runs
from tests.support.quality_builders import relation

REL = relation("public.t", [("id", 23)])
ORDER = [(stream.COMMIT_LSN, "ascending"), (stream.LSN, "ascending"),
         (stream.SEQ, "ascending")]


def _transactions(n: int, seed: int) -> list[pa.Table]:
    """``n`` transactions of 1-5 rows each, commit LSNs increasing, rows in WAL order."""
    rnd = random.Random(seed)
    out, lsn = [], 1000
    for _ in range(n):
        rows = rnd.randint(1, 5)
        lsns = [lsn + 10 * i for i in range(rows)]
        lsn += 10 * rows + rnd.randint(1, 50)
        out.append(pa.table({stream.COMMIT_LSN: [lsn] * rows, stream.LSN: lsns,
                             stream.SEQ: list(range(rows)), "id": lsns}))
        lsn += 1
    return out


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(("partitions", "part_rows", "out_rows"), [(3, 4, 5), (2, 7, 3),
                                                                    (1, 5, 5), (4, 1, 64)])
def test_merged_runs_equal_one_sorted_stream(tmp_path: Path, partitions: int, part_rows: int,
                                             out_rows: int, split: bool) -> None:
    store = LocalStore(tmp_path / "store")
    txns = _transactions(40, partitions * 100 + part_rows)
    rnd = random.Random(7)
    owned: list[list[pa.Table]] = [[] for _ in range(partitions)]
    for t in txns:  # in commit order, each transaction whole to one partition, or split:
        if split:   # each of its rows to one, as stripes of WAL deal out a large one's
            for i in range(t.num_rows):
                owned[rnd.randrange(partitions)].append(t.slice(i, 1))
        else:
            owned[rnd.randrange(partitions)].append(t)
    runs = []
    for p, tables in enumerate(owned):
        if not tables:
            continue
        sink = RunParts(store, f"changes/b/_runs/x/p{p}/")
        rows = pa.concat_tables(tables)
        for i, off in enumerate(range(0, rows.num_rows, part_rows)):
            sink.part(REL, i, rows.slice(off, part_rows))
        (run,) = sink.runs()
        assert run.rows == rows.num_rows and len(run.keys) == -(-rows.num_rows // part_rows)
        runs.append(run.keys)

    merged = merge_runs(store, "changes/b/", REL, runs, out_rows)

    expected = pa.concat_tables(txns)
    expected = expected.take(pc.sort_indices(expected, sort_keys=ORDER))
    assert merged.rows == expected.num_rows
    assert merged.first == (expected[stream.COMMIT_LSN][0].as_py(),
                            expected[stream.LSN][0].as_py(), expected[stream.SEQ][0].as_py())
    assert merged.paths == [part_path(REL, i)
                            for i in range(-(-expected.num_rows // out_rows))]
    parts = [pq.read_table(tmp_path / "store" / "changes" / "b" / p) for p in merged.paths]
    assert all(t.num_rows == out_rows for t in parts[:-1])
    assert pa.concat_tables(parts).equals(expected)


def test_wide_rows_make_parts_bounded_in_bytes(tmp_path: Path) -> None:
    """Parts are cut by bytes as well as rows: a task holds a bounded amount of Arrow data
    however wide a relation's rows are."""
    store = LocalStore(tmp_path / "store")
    txns = _transactions(30, 5)
    rows = pa.concat_tables(txns)
    sink = RunParts(store, "changes/b/_runs/x/p0/")
    for i, off in enumerate(range(0, rows.num_rows, 7)):
        sink.part(REL, i, rows.slice(off, 7))
    (run,) = sink.runs()
    row_bytes = rows.nbytes // rows.num_rows  # four int64 columns, no nulls: 32

    merged = merge_runs(store, "changes/b/", REL, [run.keys], rows_per_part=1000,
                        bytes_per_part=5 * row_bytes)

    parts = [pq.read_table(tmp_path / "store" / "changes" / "b" / p) for p in merged.paths]
    # parts as read back may carry validity bitmaps the runs did not: a part is cut at about
    # the budget, never above it, and never at less than half of it
    assert all(3 <= t.num_rows <= 5 for t in parts[:-1])
    assert 1 <= parts[-1].num_rows <= 5 and len(parts) >= rows.num_rows // 5
    assert pa.concat_tables(parts).equals(rows)
