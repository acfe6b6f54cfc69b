"""A mirror's keys across its chunks: spilled by hash, checked a partition at a time."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from cdclake.quality import crosskeys
from cdclake.quality.crosskeys import CHUNK, KeySpill, key_hash, key_table, repeated_keys


@pytest.mark.parametrize("values, kind", [
    ([1, 2, 1, None], pa.int32()),
    ([1, 2, 1, None], pa.int64()),
    (["a", "bé", "a", None], pa.string()),
    (["a", "bé", "a", None], pa.large_string()),
    ([b"\x00\xff", b"x", b"\x00\xff", None], pa.binary()),
    ([b"0123456789abcdef", b"fedcba9876543210", b"0123456789abcdef", None], pa.binary(16)),
    ([Decimal("1.50"), Decimal("2.00"), Decimal("1.50"), None], pa.decimal128(10, 2)),
    ([dt.date(2024, 1, 1), dt.date(1, 1, 1), dt.date(2024, 1, 1), None], pa.date32()),
    ([dt.datetime(2024, 1, 1, 1), dt.datetime(9999, 12, 31), dt.datetime(2024, 1, 1, 1), None],
     pa.timestamp("us", "UTC")),
    ([0.0, 1.5, -0.0, None], pa.float64()),
    ([True, False, True, None], pa.bool_()),
    ([pa.MonthDayNano([1, 2, 3]), pa.MonthDayNano([1, 2, 4]), pa.MonthDayNano([1, 2, 3]), None],
     pa.month_day_nano_interval()),
    (["a", "b", "a", None], pa.dictionary(pa.int32(), pa.string())),
])
def test_equal_keys_hash_equal_and_others_apart(values: list, kind: pa.DataType) -> None:
    # sliced, so a column that starts at an offset into its buffers is read right
    column = pa.array([values[1], *values], kind).slice(1)
    table = pa.table({"k": column})
    hashes = key_hash(table, 0).tolist()
    assert hashes[0] == hashes[2]
    assert hashes[0] != hashes[1]
    assert key_hash(table, 0).tolist() == hashes
    assert key_hash(table, 1).tolist() != hashes  # another round, another hash


def test_a_compound_key_hashes_its_columns_in_order() -> None:
    table = pa.table({"a": [1, 2, 1], "b": ["x", "y", "x"]})
    swapped = pa.table({"a": [2, 1, 1], "b": ["y", "x", "x"]})
    assert key_hash(table, 0).tolist() == key_hash(swapped, 0)[[1, 0, 2]].tolist()
    assert len(set(key_hash(pa.table({"a": [1, 2], "b": ["2", "1"]}), 0).tolist())) == 2


def _chunks(rng: random.Random, count: int, rows: int, repeats: int) -> list[pa.Table]:
    """``count`` chunks of distinct compound keys, ``repeats`` of them also in a later chunk
    and one repeated inside a chunk (which the chunk's own check reports, not this one)."""
    keys = [(i, f"k{i % 97}") for i in range(count * rows)]
    chunks = [keys[i * rows:(i + 1) * rows] for i in range(count)]
    for _ in range(repeats):
        src = rng.randrange(count - 1)
        chunks[rng.randrange(src + 1, count)].append(rng.choice(chunks[src]))
    chunks[0].append(chunks[0][0])
    return [key_table(pa.table({"id": [k[0] for k in c], "note": [k[1] for k in c]}),
                      ["id", "note"], n + 1) for n, c in enumerate(chunks)]


@pytest.mark.parametrize("limit", [100_000, 40, 1], ids=["in-one-round", "re-partitioned",
                                                          "past-the-rounds"])
def test_spilled_check_finds_what_one_sort_of_all_keys_finds(tmp_path: Path, limit: int,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    rng = random.Random(7)
    chunks = _chunks(rng, 6, 300, 25)
    checked: list[int] = []
    real = crosskeys._checked

    def recording(files: object, limit: int, round_: int) -> object:
        for table in real(files, limit, round_):  # type: ignore[arg-type]
            if round_ == 1:  # the outermost call sees every table once
                checked.append(table.num_rows)
            yield table
    monkeypatch.setattr(crosskeys, "_checked", recording)
    spill = KeySpill(tmp_path, limit)
    for chunk in chunks:
        spill.add(chunk)
    expected_rows, expected_samples = repeated_keys(pa.concat_tables(chunks), 5)
    assert expected_rows >= 25  # the repeats (and no chunk's own repeat) are counted
    assert spill.repeated(5) == (expected_rows, sum(c.num_rows for c in chunks),
                                 expected_samples)
    assert sum(checked) == sum(c.num_rows for c in chunks)
    if limit == 40:  # every partition re-partitioned until it fits
        assert max(checked) <= limit and len(checked) > crosskeys.FANOUT
    spill.close()
    assert list(tmp_path.iterdir()) == []


def test_one_chunk_writes_nothing_and_clean_chunks_pass(tmp_path: Path) -> None:
    single = KeySpill(tmp_path / "one", 10)
    single.add(key_table(pa.table({"id": [1, 1, 2]}), ["id"], 1))
    assert single.repeated(5) == (0, 3, [])  # the chunk's own check has it
    assert not (tmp_path / "one").exists()
    clean = KeySpill(tmp_path / "two", 10)
    for n in range(3):
        clean.add(key_table(pa.table({"id": list(range(n * 50, n * 50 + 50))}), ["id"], n + 1))
    assert clean.repeated(5) == (0, 150, [])
    clean.close()
    assert list((tmp_path / "two").iterdir()) == []


def test_key_table_leaves_null_keys_out() -> None:
    table = key_table(pa.table({"a": [1, None, 3], "b": ["x", "y", None], "v": [1, 2, 3]}),
                      ["a", "b"], 4)
    assert table.to_pylist() == [{"a": 1, "b": "x", CHUNK: 4}]
