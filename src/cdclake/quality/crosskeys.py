"""A mirror's keys across its chunks, checked in bounded memory.

The mirror suite runs on one chunk of a mirror at a time, so a key held by two chunks is a
duplicate no chunk's own check sees. To find those without holding every key of the table,
each chunk's key columns are written to local Arrow IPC files, partitioned by a hash of the
key (:data:`FANOUT` files): every row of one key lands in the same file, and each file is then
checked alone — sorted by key, a repeated key is a row equal to the one before it. A file with
more rows than the limit (``quality_chunk_rows``) is partitioned again with another hash, so
what is in memory at once is bounded by the configuration, not by the table. A table that
comes in one chunk is never written: its chunk's check is the whole table's.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdclake.mixing import splitmix64

#: files a table's keys are partitioned into (and each oversized file again)
FANOUT = 16
#: partitioning rounds at most: past them a file is checked whatever its size (its rows
#: then share their hash in every round: one repeated key, which is what the check reports)
MAX_ROUNDS = 4
#: the column of a key table that says which chunk a key came from
CHUNK = "_chunk"

_GOLDEN = 0x9E3779B97F4A7C15


class KeySpill:
    """The keys of one mirror's chunks, as :meth:`add` receives them (null keys left out,
    :data:`CHUNK` numbering each row's chunk); :meth:`repeated` checks them, :meth:`close`
    removes the files."""

    def __init__(self, directory: Path, limit: int) -> None:
        self._directory = directory
        self._limit = max(1, limit)
        self._first: pa.Table | None = None  #: the first chunk's keys, until a second comes
        self._root: Path | None = None
        self._files: _Partitions | None = None
        self.rows = 0

    def add(self, keys: pa.Table) -> None:
        self.rows += keys.num_rows
        if self._files is None and self._first is None:
            self._first = keys
            return
        if self._files is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix="keys-", dir=self._directory))
            self._files = _Partitions(self._root / "0", salt=0)
            assert self._first is not None
            self._files.write(self._first)
            self._first = None
        self._files.write(keys)

    def repeated(self, samples: int) -> tuple[int, int, list[dict[str, Any]]]:
        """The rows whose key is in more than one chunk, all rows, and up to ``samples``
        such keys (smallest first) with how many rows hold each."""
        if self._files is None:
            return 0, self.rows, []
        self._files.close()
        unexpected = 0
        found: list[dict[str, Any]] = []
        for table in _checked(self._files, self._limit, 1):
            count, shown = repeated_keys(table, samples)
            unexpected += count
            found.extend(shown)
        keys = [k for k in found[0] if k != "rows"] if found else []
        found.sort(key=lambda s: tuple(s[k] for k in keys))
        return unexpected, self.rows, found[:samples]

    def close(self) -> None:
        if self._files is not None:
            self._files.close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
        self._first = self._files = self._root = None


def _checked(files: _Partitions, limit: int, round_: int) -> Iterator[pa.Table]:
    """Each partition's rows as one table, no larger than ``limit`` rows unless
    :data:`MAX_ROUNDS` partitionings could not split it."""
    for index, rows in enumerate(files.rows):
        if not rows:
            continue
        path = files.path(index)
        if rows > limit and round_ < MAX_ROUNDS:
            again = _Partitions(path.with_name(f"{path.name}.{round_}"), salt=round_)
            with pa.OSFile(str(path)) as source:
                for batch in pa.ipc.open_stream(source):
                    again.write(pa.Table.from_batches([batch]))
            again.close()
            path.unlink()
            yield from _checked(again, limit, round_ + 1)
            continue
        with pa.OSFile(str(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
        path.unlink()
        yield table


class _Partitions:
    """:data:`FANOUT` IPC stream files under ``directory``, a row's file chosen by the hash
    of its key with ``salt``."""

    def __init__(self, directory: Path, salt: int) -> None:
        directory.mkdir()
        self._directory = directory
        self._salt = salt
        self._writers: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
        self.rows = [0] * FANOUT

    def path(self, index: int) -> Path:
        return self._directory / f"{index:02d}.arrows"

    def write(self, keys: pa.Table) -> None:
        if not keys.num_rows:
            return
        part = (key_hash(keys.drop_columns([CHUNK]), self._salt) % np.uint64(FANOUT)).astype(
            np.int64)
        counts = np.bincount(part, minlength=FANOUT)
        ordered = keys.take(pa.array(np.argsort(part, kind="stable")))
        start = 0
        for index, count in enumerate(counts.tolist()):
            if count:
                self._writer(index, keys.schema).write_table(ordered.slice(start, count))
                self.rows[index] += count
                start += count

    def _writer(self, index: int, schema: pa.Schema) -> pa.ipc.RecordBatchStreamWriter:
        if index not in self._writers:
            sink = pa.OSFile(str(self.path(index)), "wb")
            self._writers[index] = (sink, pa.ipc.new_stream(sink, schema))
        return self._writers[index][1]

    def close(self) -> None:
        for sink, writer in self._writers.values():
            writer.close()
            sink.close()
        self._writers.clear()


def key_hash(keys: pa.Table, salt: int) -> np.ndarray:
    """A 64-bit hash of each row's key columns: equal keys (as ``pc.equal`` compares them)
    hash equal. Fixed-width values hash their storage integers, decimals their float value,
    strings and bytes go through pandas' vectorised hash."""
    out = np.full(keys.num_rows, ((salt + 1) * _GOLDEN) % 2**64, dtype=np.uint64)
    for column in keys.columns:
        out = splitmix64(out * np.uint64(31) + _values(column.combine_chunks()))
    return out


def _values(array: pa.Array) -> np.ndarray:
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    kind = array.type
    if pa.types.is_boolean(kind):
        array = pc.cast(array, pa.uint8())
    elif pa.types.is_decimal(kind):
        array = pc.cast(array, pa.float64(), safe=False)
    if pa.types.is_floating(array.type):  # -0.0 equals 0.0: one bit pattern for both
        values = array.to_numpy(zero_copy_only=False) + 0.0
        return values.astype(np.float64).view(np.uint64)
    width = array.type.bit_width if _fixed(array.type) else 0
    if width in (8, 16, 32, 64):
        view = pc.fill_null(array.view(getattr(pa, f"uint{width}")()), 0)
        return view.to_numpy(zero_copy_only=False).astype(np.uint64)
    import pandas as pd  # the one vectorised hash of strings and bytes at hand

    values = array.to_numpy(zero_copy_only=False)
    try:
        return pd.util.hash_array(values, categorize=False)
    except TypeError:  # values pandas cannot hash (intervals, …): their text
        return pd.util.hash_array(np.array([str(v) for v in values], dtype=object),
                                  categorize=False)


def _fixed(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_temporal(kind)


def repeated_keys(table: pa.Table, samples: int) -> tuple[int, list[dict[str, Any]]]:
    """Of key rows (with :data:`CHUNK`): the rows whose key is in more than one chunk, and
    up to ``samples`` such keys with how many rows hold each.

    Sorted by key, a repeated key is a row equal to the one before it: the sort costs a few
    bytes a row, where grouping every key would hold a hash table of them all; only the
    repeated keys (none in a healthy mirror) are grouped, by chunk."""
    keys = [c for c in table.column_names if c != CHUNK]
    if table.num_rows < 2:
        return 0, []
    ordered = table.sort_by([(k, "ascending") for k in keys])
    same: Any = None
    for k in keys:
        column = ordered.column(k)
        equal = pc.equal(column.slice(1), column.slice(0, ordered.num_rows - 1))
        same = equal if same is None else pc.and_(same, equal)
    after = np.flatnonzero(same.to_numpy(zero_copy_only=False))  # row i+1 repeats row i
    if not len(after):
        return 0, []
    repeated = ordered.take(np.union1d(after, after + 1))
    groups = repeated.group_by(keys).aggregate([(CHUNK, "count_distinct"), (CHUNK, "count")])
    spread = groups.filter(pc.greater(groups.column(f"{CHUNK}_count_distinct"), 1))
    rows = spread.column(f"{CHUNK}_count")
    shown = spread.sort_by([(k, "ascending") for k in keys]).slice(0, samples).select(
        [*keys, f"{CHUNK}_count"]).to_pylist()
    return (int(pc.sum(rows).as_py() or 0),
            [{**{k: s[k] for k in keys}, "rows": s[f"{CHUNK}_count"]} for s in shown])


def key_table(data: pa.Table, keys: Sequence[str], chunk: int) -> pa.Table:
    """The typed key columns of a mirror chunk, with its number: what :class:`KeySpill`
    compares across chunks. Rows with a null key are left out (the not-null check reports
    them; a key the decoder could only keep as text is one)."""
    selected = data.select(list(keys))
    present = pc.and_(*[pc.is_valid(c) for c in selected.columns]) if len(keys) > 1 \
        else pc.is_valid(selected.column(0))
    selected = selected.filter(present)
    return selected.append_column(CHUNK, pa.array(np.full(selected.num_rows, chunk,
                                                          dtype=np.int32)))
