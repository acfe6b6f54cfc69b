"""The merge of a keyed table's batch in Arrow: the common case at columnar speed.

:mod:`cdclake.lake.apply` replays a batch one change at a time on Python rows; that is what
every case needs (REPLICA IDENTITY FULL multisets, unchanged TOAST, defaults, retyped and
relabelled values, exact texts, rewrites), and it costs a dict per change and per mirror row
a batch touches. Most batches are simpler: one table definition with a key (its versions
differ at most in relfilenode, as after a TRUNCATE), and changes that carry every value
typed. For those the replay's result is computed column-wise, with the same rules:

- every change is an *event* on a key: INSERT and UPDATE set the new key's row, DELETE takes
  the old key, an UPDATE that changes the key takes the old one too; per key the last event
  (the source's order) decides: the row it sets, or none;
- a TRUNCATE empties the mirror: the events after the last one replace every data file;
- every other data file that holds one of the events' keys is rewritten without those rows
  (copy-on-write, a record batch at a time), and the rows the events set are appended, read
  again from the batch's parts — files of at most :data:`FILE_BYTES`, one commit, carrying
  the batch's commit LSN;
- ``not_found`` counts the UPDATEs and DELETEs whose row was neither set earlier in the batch
  nor in the mirror, as the replay does.

Memory is bounded by :data:`THREADS` times :data:`BUCKET_ROWS` changes and two files' rows
(one being written while the next is gathered), plus the keys the batch touches (and their
positions): neither the changes' values, the mirror nor a stored file is held whole. A
table's batch of more pending changes than :data:`BUCKET_ROWS` (a bulk load of millions) is
read a part at a time and its events dealt by key into buckets of about that many each
(:func:`bucket_ids`; the key's first column an integer), written to local Arrow files and
decided :data:`THREADS` buckets at a time, on as many threads: a key's events are all in its
bucket, so each bucket's last events, look-ups and stored rows are its own. The events'
order is each change's rank in the source's order, so a bucket needs no other. A batch whose
key starts with another type is decided at once, as are versions whose changes interleave
(they are sorted first).
:func:`takes` says whether a table's batch qualifies; :func:`merge` answers ``None`` when the
mirror itself needs the replay (a label renamed, a type no promotion holds).
"""

from __future__ import annotations

import itertools
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table, Transaction

from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake import labels, rules
from cdclake.lake.apply import Counts
from cdclake.lake.batch import Batch, TableEntry
from cdclake.lake.changes import KEY, VersionInfo
from cdclake.lake.datafiles import DataFiles
from cdclake.lake.metrics import guard_metrics
from cdclake.lake.region import MAX_FILTER_KEYS, column_filter, combine, filter_limit
from cdclake.lake.retype import evolved_columns
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    apply_evolution,
    mirror_fields,
    mirror_system_fields,
    plan_evolution,
)
from cdclake.lake.tables import row_count
from cdclake.lake.typemap import arrow_type
from cdclake.lake.visibility import SnapshotFacts, in_snapshot
from cdclake.lsn import format_lsn
from cdclake.mixing import splitmix64

_OPS = {stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE, stream.OP_TRUNCATE}
#: key types whose Arrow equality is SQL equality (no NaN, no nested values)
_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string,
              pa.types.is_binary, pa.types.is_fixed_size_binary, pa.types.is_date,
              pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_boolean)


@dataclass(frozen=True)
class Outcome:
    """What :func:`merge` committed, for the table's report."""

    counts: Counts
    pending: int  #: changes applied (after the summary LSN and the initial snapshot)
    skipped_applied: int
    skipped_snapshot: int
    rows_written: int
    strategy: str
    schema_changes: list[str]
    snapshot_id: int | None = None  #: the mirror's snapshot after the commit


@dataclass(frozen=True)
class Changes:
    """A table's batch as the Arrow merge reads it: the narrow columns of every change, a part
    at a time, and the whole rows, read again part by part for the rows that end up in the
    mirror."""

    info: VersionInfo
    rows: int  #: the table's changes in the batch
    last_lsn: int  #: the largest commit LSN among them
    #: the stream's system columns and the key, in the source's order, a part at a time, with
    #: each change's rank in that order (``_ORD``)
    narrow: Callable[[], Iterator[pa.Table]]
    parts: Callable[[Sequence[str] | None], Iterator[pa.Table]]  #: all columns, or these
    #: rank -> position among the rows ``parts`` yields; None: the same (the versions' parts
    #: are in the source's order)
    positions: np.ndarray | None = None
    #: whether the keys can be dealt into buckets (:func:`bucket_ids`): the changes are read
    #: a part at a time, and the first key column is an integer
    bucketed: bool = False


def takes(batch: Batch, entry: TableEntry) -> Changes | None:
    """``entry``'s changes of ``batch`` when they qualify (the same columns, key and labels in
    every version with changes — a TRUNCATE's new relfilenode is a version of its own — a key
    of plain types, only INSERT/UPDATE/DELETE/TRUNCATE, every value typed, no unchanged
    TOAST, every DELETE naming its key); else None: the replay takes them. The checks read
    the narrow columns a part at a time."""
    versions = [v for v in entry.versions if v.rows]
    if not versions or not all(v.paths for v in versions):
        return None
    infos = []
    for v in versions:
        path = f"{batch.directory}/{v.paths[0]}"
        try:
            schema = pq.read_schema(path, filesystem=batch.filesystem)
        except (OSError, pa.ArrowInvalid) as exc:
            raise LakeError(f"batch {batch.name}: cannot read {path} of table {entry.table}: "
                            f"{exc}") from exc
        infos.append(VersionInfo.of(v.relation, schema))
    info = infos[-1]
    if any((i.columns, i.identity, i.labels) != (info.columns, info.identity, info.labels)
           or not i.arrow_schema.equals(info.arrow_schema) for i in infos):
        return None
    if info.identity.kind != KEY or any(i.defaults for i in infos):
        return None
    by_attnum = {c.attnum: c.name for c in info.columns}
    key_types = [info.arrow_schema.field(by_attnum[a]).type if a in by_attnum else None
                 for a in info.identity.attnums]
    if any(t is None or not any(ok(t) for ok in _KEY_TYPES) for t in key_types):
        return None

    def parts(columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        for v in versions:  # the positions :func:`merge` takes rows at: in this order
            yield from batch.parts(entry, v, columns)

    narrow = [*_SYSTEM, *(by_attnum[a] for a in info.identity.attnums)]
    rows, last_lsn, ordered = 0, 0, True
    last: tuple[int, int, int] | None = None
    #: the checked parts, while they are few enough to be held (then not read again)
    held: list[pa.Table] | None = []
    for v in versions:
        where = (f"batch {batch.name}, table {entry.table}, version "
                 f"v{v.relation.valid_from:X}")
        begins = True
        for part in batch.parts(entry, v, narrow):
            if not part.num_rows:
                continue
            if not _qualifies(part):
                return None  # a rewrite, an unknown op, a value untyped: the replay
            _check_order(part, where)
            head = _order_at(part, 0)
            if last is not None and head < last:
                if not begins:
                    raise LakeError(f"{where}: rows are not in commit/WAL order at LSN "
                                    f"{format_lsn(head[1])} (commit {format_lsn(head[0])})")
                ordered = False  # the versions interleave: sorted, held whole
            last = _order_at(part, part.num_rows - 1)
            last_lsn = max(last_lsn, pc.max(part.column(stream.COMMIT_LSN)).as_py())
            rows += part.num_rows
            begins = False
            if held is not None:
                held.append(_slim(part))
                if rows > BUCKET_ROWS:
                    held = None
    if not rows:
        return None

    if ordered:
        def stream_parts() -> Iterator[pa.Table]:
            at = 0
            for part in held if held is not None else map(_slim, parts(narrow)):
                if part.num_rows:
                    rank = pa.array(np.arange(at, at + part.num_rows, dtype=np.int64))
                    at += part.num_rows
                    yield part.append_column(_ORD, rank)
        bucketed = held is None and pa.types.is_integer(key_types[0])
        return Changes(info, rows, last_lsn, stream_parts, parts, bucketed=bucketed)
    # held whole to be sorted: the versions' changes in the source's order
    data = pa.concat_tables(parts(narrow))
    data = data.append_column(_POS, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    data = _slim(data.take(pc.sort_indices(data, [(c, "ascending") for c in rules.ORDER])))
    positions = data.column(_POS).to_numpy()
    data = data.drop_columns([_POS]).append_column(
        _ORD, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    return Changes(info, rows, last_lsn, lambda: iter([data]), parts, positions)


def _qualifies(part: pa.Table) -> bool:
    """Whether a part's changes are what the Arrow merge takes (see :func:`takes`)."""
    ops = set(pc.unique(part.column(stream.OP)).to_pylist())
    if not ops <= _OPS:
        return False
    if part.column(stream.PG_TEXT).null_count != part.num_rows:
        return False
    toast = part.column(stream.UNCHANGED_TOAST)
    if pc.max(pc.fill_null(pc.list_value_length(toast), 0)).as_py() or 0:
        return False
    old = part.column(stream.OLD_KEY)
    deletes = pc.equal(part.column(stream.OP), stream.OP_DELETE)
    if pc.any(pc.and_(deletes, old.is_null())).as_py():
        return False  # malformed: the replay says so
    if stream.PG_TEXT in {f.name for f in old.type}:
        texts = pc.struct_field(old, stream.PG_TEXT)
        if texts.null_count != len(texts):
            return False
    return True


def _order_at(part: pa.Table, i: int) -> tuple[int, int, int]:
    return tuple(part.column(c)[i].as_py() for c in rules.ORDER)  # type: ignore[return-value]


def _slim(part: pa.Table) -> pa.Table:
    """What the merge reads of the narrow columns, once checked (a bulk load's batch holds
    millions of changes)."""
    return part.drop_columns([stream.LSN, stream.SEQ, stream.UNCHANGED_TOAST, stream.PG_TEXT])


#: changes whose keys the merge decides at once: a table's batch with more is dealt into
#: buckets by key (:func:`bucket_ids`), written to local files and decided bucket by bucket
BUCKET_ROWS = 1 << 21
#: buckets decided at once (:func:`_per_bucket`), and so held in memory together
THREADS = 2

_T = TypeVar("_T")


def bucket_ids(keys: pa.ChunkedArray | pa.Array, buckets: int) -> np.ndarray:
    """The bucket of each key (its first column, an integer): a mix of its bits (SplitMix64's
    finaliser) modulo ``buckets``, so every change of one key lands in one bucket and keys
    spread evenly however they are spaced."""
    x = splitmix64(pc.fill_null(keys, 0).cast(pa.int64(), safe=False).to_numpy().view(np.uint64))
    return (x % np.uint64(buckets)).astype(np.int64)


def _split(table: pa.Table, column: str, buckets: int) -> list[pa.Table]:
    """``table``'s rows by the bucket of their ``column``."""
    if buckets == 1:
        return [table]
    ids = pa.array(bucket_ids(table.column(column), buckets))
    return [table.filter(pc.equal(ids, b)) for b in range(buckets)]


class _Buckets:
    """A table's events and look-ups (:func:`_events`, :func:`_lookups`) dealt into buckets by
    key: held in memory when there is one, else in Arrow IPC files in a private temporary
    directory, read back a bucket at a time."""

    def __init__(self, buckets: int, key: str, dir: Path) -> None:
        self.buckets = buckets
        self.key = key
        self.dir = dir
        self.held: dict[str, list[pa.Table]] = {"events": [], "lookups": []}
        self.writers: dict[tuple[str, int], pa.ipc.RecordBatchFileWriter] = {}

    def add(self, kind: str, table: pa.Table) -> None:
        if self.buckets == 1:
            self.held[kind].append(table)
            return
        for b, rows in enumerate(_split(table, self.key, self.buckets)):
            if rows.num_rows:
                w = self.writers.get((kind, b))
                if w is None:
                    w = self.writers[kind, b] = pa.ipc.new_file(
                        str(self.dir / f"{kind}-{b}.arrow"), rows.schema)
                w.write_table(rows)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()

    def read(self, kind: str, b: int, schema: pa.Schema) -> pa.Table:
        if self.buckets == 1:
            return pa.concat_tables(self.held[kind]) if self.held[kind] else schema.empty_table()
        path = self.dir / f"{kind}-{b}.arrow"
        if not path.exists():
            return schema.empty_table()
        with pa.memory_map(str(path)) as f:
            return pa.ipc.open_file(f).read_all()


def merge(table: Table, source: Changes, *, name: str, stored: int | None,
          facts: SnapshotFacts | None, properties: Mapping[str, str],
          max_keys: int = MAX_FILTER_KEYS) -> Outcome | None:
    """Apply ``source`` (:func:`takes` said yes) to the mirror ``table`` in one commit whose
    snapshot carries ``properties``; None when the mirror needs the replay (nothing was
    written). A batch of more than :data:`BUCKET_ROWS` pending changes whose key's first
    column is an integer is decided a bucket of keys at a time: what the merge holds is
    bounded by that, plus the keys it touches."""
    info = source.info
    stored_enums = labels.stored_labels(table.metadata.properties)
    enums = labels.combine([stored_enums, info.labels])
    columns, retyped = evolved_columns(table.schema(), name, [info.columns])
    if retyped or labels.translation(stored_enums, enums) or labels.translation(info.labels,
                                                                                enums):
        return None

    def wanted(part: pa.Table) -> tuple[pa.Array, pa.Array]:
        lsn = part.column(stream.COMMIT_LSN)
        seen = pc.is_valid(lsn) if stored is None else pc.greater(lsn, stored)
        if facts is None:
            return seen, seen
        xid = pc.cast(part.column(stream.XID), pa.int64())
        return seen, pc.and_(seen, pc.invert(in_snapshot(rules.ARROW, facts, lsn, xid)))

    counts = Counts()
    names = {stream.OP_INSERT: "inserted", stream.OP_UPDATE: "updated",
             stream.OP_DELETE: "deleted", stream.OP_TRUNCATE: "truncated"}
    unseen = pending = 0
    truncated = -1  # the rank of the last pending TRUNCATE: the changes after it decide
    for part in source.narrow():
        seen, want = wanted(part)
        unseen += pc.sum(pc.cast(seen, pa.int64())).as_py() or 0
        rows = part.filter(want)
        pending += rows.num_rows
        for e in pc.value_counts(rows.column(stream.OP)).to_pylist():
            setattr(counts, names[e["values"]], getattr(counts, names[e["values"]]) + e["counts"])
        ranks = rows.column(_ORD).filter(pc.equal(rows.column(stream.OP), stream.OP_TRUNCATE))
        if len(ranks):
            truncated = max(truncated, pc.max(ranks).as_py())
    skipped = (source.rows - unseen, unseen - pending)
    if pending == 0:
        return Outcome(counts, 0, *skipped, 0, "none", [])

    evolution = plan_evolution(table.schema(), columns, name, mirror_system_fields())
    tx = table.transaction()
    apply_evolution(tx, evolution)
    if enums != stored_enums:
        tx.set_properties({labels.PROPERTY: labels.property_value(enums)})
    schema = tx.table_metadata.schema()
    fields = mirror_fields(schema, name)
    attnums = info.identity.attnums
    keys = [fields[a].name for a in attnums]  # the mirror's names, as the commit leaves them
    key_types = [_plain_type(arrow_type(fields[a].field_type)) for a in attnums]
    by_attnum = {c.attnum: c.name for c in info.columns}
    change_keys = [by_attnum[a] for a in attnums]
    buckets = -(-pending // BUCKET_ROWS) if source.bucketed else 1
    key_schema = pa.schema([pa.field(k, t) for k, t in zip(keys, key_types, strict=True)])

    with tempfile.TemporaryDirectory(prefix="cdclake-merge-") as tmp:
        deal = _Buckets(buckets, keys[0], Path(tmp))
        try:
            for part in source.narrow():
                _seen, want = wanted(part)
                rows = part.filter(pc.and_(want, pc.greater(part.column(_ORD), truncated)))
                if rows.num_rows:
                    deal.add("events", _events(rows, change_keys, keys, key_types))
                    deal.add("lookups", _lookups(rows, change_keys, keys, key_types))
        finally:
            deal.close()
        events_schema = key_schema.append(pa.field("_ev", pa.int64()))
        lookups_schema = key_schema.append(pa.field("_ord", pa.int64()))

        def decide(b: int) -> tuple[pa.Table, np.ndarray]:
            """Bucket ``b``'s touched keys, and the ranks of the changes that set rows."""
            last = rules.last_per_key(rules.ARROW, deal.read("events", b, events_schema), keys,
                                      ("_ev",))
            ev = last.column("_ev")
            return last.select(keys), pc.shift_right(
                ev.filter(pc.equal(pc.bit_wise_and(ev, 1), 1)), 1).to_numpy()

        decided = _per_bucket(decide, buckets)
        touched = [t for t, _ in decided]
        chosen_parts = [c for _, c in decided]
        ranks = np.concatenate(chosen_parts) if chosen_parts else np.array([], np.int64)
        # the changes whose rows the mirror gets, by position in the batch's parts
        chosen = np.sort(ranks if source.positions is None else source.positions[ranks])
        target = _target(schema)
        temporal = [f.name for f in target if _temporal(f.type) and f.name in info.names]
        for part in _taken(source.parts, chosen, temporal) if temporal else ():
            guard_metrics(tx, part)  # before any file is written: it sets how they are

        snap = table.current_snapshot()
        strategy = "append" if snap is None else "region"
        rewritten: list[FileScanTask] = []
        in_mirror: list[pa.Table] = [key_schema.empty_table()] * buckets
        if truncated >= 0:
            strategy = "truncate"
            deleted = [t.file for t in table.scan().plan_files()]
        else:
            region = _region(table, name, attnums, touched, max_keys)
            if snap is not None and region == AlwaysTrue():
                strategy = "full-scan"
            stored_keys = DataFiles(tx.table_metadata, table.io, schema.select(*keys))
            found: list[list[pa.Table]] = [[] for _ in range(buckets)]
            for task in table.scan(row_filter=region).plan_files() if snap is not None else ():
                keys_of = _split(_cast(stored_keys.table(task), key_types), keys[0], buckets)
                hits = [_semi_join(k, t, keys) for k, t in zip(keys_of, touched, strict=True)]
                if any(h.num_rows for h in hits):
                    rewritten.append(task)
                    for b, h in enumerate(hits):
                        found[b].append(h)
            deleted = [t.file for t in rewritten]
            in_mirror = [pa.concat_tables(f) if f else key_schema.empty_table() for f in found]
        counts.not_found = sum(_per_bucket(
            lambda b: _not_found(deal.read("lookups", b, lookups_schema),
                                 deal.read("events", b, events_schema), keys, in_mirror[b]),
            buckets))

    kept = DataFiles(tx.table_metadata, table.io, schema)

    def rows() -> Iterator[pa.Table]:
        for task in rewritten:  # a file at a time, a record batch at a time
            for part in kept.batches(task):
                stored_rows = pa.Table.from_batches([part])
                index = pa.array(range(stored_rows.num_rows), pa.int64())
                keyed = _split(_cast(stored_rows.select(keys), key_types).append_column(
                    "_i", index), keys[0], buckets)
                hit = [_semi_join(k, t, keys).column("_i")
                       for k, t in zip(keyed, touched, strict=True)]
                keep = pc.invert(pc.is_in(index, value_set=pa.concat_arrays(
                    [c for h in hit for c in h.chunks]) if any(len(h) for h in hit)
                    else pa.array([], pa.int64())))
                yield _conform(stored_rows.filter(keep), target)
        for part in _taken(source.parts, chosen, None):
            yield _mirror_rows(part, info, schema, name)

    files = _write(tx, table, rows())
    producer = tx.update_snapshot(snapshot_properties=dict(properties))
    with (producer.overwrite() if deleted else producer.fast_append()) as update:
        for f in deleted:
            update.delete_data_file(f)
        for f in files:
            update.append_data_file(f)
    snap = tx.commit_transaction().current_snapshot()
    return Outcome(counts, pending, *skipped, sum(f.record_count for f in files),
                   strategy, [c.describe() for c in evolution],
                   snap.snapshot_id if snap else None)


def _check_order(data: pa.Table, where: str) -> None:
    """The replay's rule: a version's rows not in (commit LSN, LSN, seq) order are refused."""
    if data.num_rows < 2:
        return
    columns = [data.column(x) for x in rules.ORDER]
    n = data.num_rows
    back = rules.before(rules.ARROW, [x.slice(1) for x in columns],
                        [x.slice(0, n - 1) for x in columns])
    bad = pc.indices_nonzero(back)
    if len(bad):
        i = bad[0].as_py() + 1
        c, lsn, _seq = columns
        raise LakeError(f"{where}: rows are not in commit/WAL order at LSN "
                        f"{format_lsn(lsn[i].as_py())} (commit {format_lsn(c[i].as_py())})")


def _plain_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _cast(table: pa.Table, types: Sequence[pa.DataType]) -> pa.Table:
    """The first columns of ``table`` as ``types`` (extension types by their storage)."""
    cols = list(table.columns)
    for i, t in enumerate(types):
        col = cols[i]
        if isinstance(col.type, pa.BaseExtensionType):
            col = pa.chunked_array([c.storage for c in col.chunks], col.type.storage_type)
        cols[i] = col.cast(t)
    return pa.table(cols, names=table.column_names)


def _events(changes: pa.Table, names: Sequence[str], keys: Sequence[str],
            types: Sequence[pa.DataType]) -> pa.Table:
    """One row per (change, key it decides): ``keys`` columns, ``_ev`` = 2 × the change's
    rank + 1 if it sets the key's row (INSERT, UPDATE), + 0 if it takes it (DELETE, and the
    old key of a key-changing UPDATE)."""
    op = changes.column(stream.OP)
    new = [changes.column(n).cast(t) for n, t in zip(names, types, strict=True)]
    old = [pc.struct_field(changes.column(stream.OLD_KEY), n).cast(t)
           for n, t in zip(names, types, strict=True)]
    setting = rules.sets(rules.ARROW, op)
    taking = rules.takes(rules.ARROW, op, old, new)
    ev = pc.multiply(changes.column(_ORD), 2)
    parts = [pa.table([*(c.filter(setting) for c in new), pc.add(ev, 1).filter(setting)],
                      names=[*keys, "_ev"]),
             pa.table([*(c.filter(taking) for c in old), ev.filter(taking)],
                      names=[*keys, "_ev"])]
    return pa.concat_tables(parts)


def _lookups(changes: pa.Table, names: Sequence[str], keys: Sequence[str],
             types: Sequence[pa.DataType]) -> pa.Table:
    """The key each UPDATE and DELETE looks up (its old key when logged, else the new one),
    ``_ord`` = 2 × its rank: before its own event (:func:`_events`)."""
    looks = rules.looks_up(rules.ARROW, changes.column(stream.OP))
    old_struct = changes.column(stream.OLD_KEY)
    logged = rules.ARROW.present(old_struct)
    lookup = [rules.looked_up(rules.ARROW, logged, pc.struct_field(old_struct, n).cast(t),
                              changes.column(n).cast(t)).filter(looks)
              for n, t in zip(names, types, strict=True)]
    return pa.table([*lookup, pc.multiply(changes.column(_ORD), 2).filter(looks)],
                    names=[*keys, "_ord"])


def _per_bucket(fn: Callable[[int], _T], buckets: int) -> list[_T]:
    """``fn`` of every bucket, in bucket order, :data:`THREADS` buckets at a time: a bucket's
    work is Arrow's kernels (grouping, sorting, joining), which run without the GIL, and
    buckets share nothing (a key's events are all in its bucket)."""
    if buckets == 1:
        return [fn(0)]
    with ThreadPoolExecutor(min(THREADS, buckets), thread_name_prefix="cdclake-bucket") as pool:
        return list(pool.map(fn, range(buckets)))


def _semi_join(rows: pa.Table, keys_of: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows of ``rows`` whose key is one of ``keys_of``."""
    return rows.join(keys_of, list(keys), join_type="left semi", use_threads=False)


def _region(table: Table, name: str, attnums: Sequence[int], touched: Sequence[pa.Table],
            max_keys: int) -> BooleanExpression:
    """A metrics filter for the data files that can hold a touched key (a superset: it only
    prunes), as :mod:`cdclake.lake.region` makes one: on each integer or text key column, as
    the mirror names it before this commit; every file past the region's limit of keys."""
    fields = mirror_fields(table.schema(), name)
    if sum(t.num_rows for t in touched) > filter_limit(max_keys, row_count(table)):
        return AlwaysTrue()
    keys = pa.concat_tables(touched)
    terms = [column_filter(fields[a], set(col.to_pylist()))
             for a, col in zip(attnums, keys.columns, strict=True)
             if a in fields and (pa.types.is_integer(col.type) or pa.types.is_string(col.type))]
    return combine(terms, And) if terms else AlwaysTrue()


def _target(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.field_type), nullable=not f.required)
                      for f in schema.fields])


def _mirror_rows(rows: pa.Table, info: VersionInfo, schema: Schema, name: str) -> pa.Table:
    """Change rows as mirror rows of ``schema`` (every value typed: no ``_cdc_pg_text``)."""
    target = _target(schema)
    by_attnum = {c.attnum: c.name for c in info.columns}
    fields = {f.name: a for a, f in mirror_fields(schema, name).items()}
    arrays = []
    for f in target:
        attnum = fields.get(f.name)
        if f.name == CDC_COMMIT_LSN:
            col = rows.column(stream.COMMIT_LSN)
        elif f.name == CDC_COMMIT_TS:
            col = rows.column(stream.COMMIT_TS)
        elif attnum is not None and attnum in by_attnum:
            col = rows.column(by_attnum[attnum])
        elif attnum is not None or f.name == CDC_PG_TEXT:
            col = pa.nulls(rows.num_rows, f.type)
        else:
            raise LakeError(f"table {name}: column {f.name} is neither a data column nor a "
                            "system column cdclake writes")
        try:
            arrays.append(col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise LakeError(f"table {name}: column {f.name} ({f.type}) cannot hold the "
                            f"values of the change stream: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=target)


def _conform(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """Stored rows (as pyiceberg reads them) in the schema the commit writes."""
    return pa.Table.from_arrays(
        [_cast(rows.select([f.name]), [f.type]).column(0) for f in target], schema=target)


def _not_found(lookups: pa.Table, events: pa.Table, keys: Sequence[str],
               in_mirror: pa.Table) -> int:
    """The UPDATEs and DELETEs whose row was not there: the key they look up
    (:func:`_lookups`) was last taken in the batch, or — when the batch had not touched it
    before — is not among the mirror's keys ``in_mirror``."""
    if not lookups.num_rows:
        return 0
    state = pa.int8()
    records = pa.concat_tables([
        pa.table([*lookups.select(keys).columns, lookups.column("_ord"),
                  pa.nulls(lookups.num_rows, state)], names=[*keys, "_ord", "_state"]),
        pa.table([*events.select(keys).columns, pc.add(pc.bit_wise_and(
            events.column("_ev"), pa.scalar(-2, pa.int64())), 1),
            pc.bit_wise_and(events.column("_ev"), 1).cast(state)],
            names=[*keys, "_ord", "_state"]),
    ]).sort_by([(k, "ascending") for k in keys] + [("_ord", "ascending")]).combine_chunks()
    n = records.num_rows
    first = pa.array(np.arange(n) == 0)  # where each key's records begin
    for k in keys:
        col = records.column(k).chunk(0)
        first = pc.or_(first, pa.concat_arrays(
            [pa.array([True]), pc.not_equal(col.slice(1), col.slice(0, n - 1))]))
    mirror = pa.scalar(2, state)  # before a key's first event: the mirror's row, if any
    own = records.column("_state").chunk(0)
    marked = pc.fill_null_forward(pc.if_else(pc.and_(first, pc.is_null(own)), mirror, own))
    prior = pc.if_else(first, mirror,
                       pa.concat_arrays([pa.array([2], state), marked.slice(0, n - 1)]))
    looked = pc.is_null(own)
    from_mirror = records.select(keys).filter(pc.and_(looked, pc.equal(prior, 2)))
    absent = from_mirror.num_rows - _semi_join(from_mirror, in_mirror, keys).num_rows
    taken = pc.sum(pc.and_(looked, pc.equal(prior, 0)).cast(pa.int64())).as_py() or 0
    return absent + taken


#: a change's position in the batch (its versions' parts in order), beside the narrow columns
_POS = "_cdclake_pos"
#: a change's rank in the source's order (its narrow columns' parts in order)
_ORD = "_cdclake_ord"
#: the change columns the Arrow merge reads for every change (the key's come with them)
_SYSTEM = (stream.COMMIT_LSN, stream.LSN, stream.SEQ, stream.XID, stream.OP, stream.OLD_KEY,
           stream.UNCHANGED_TOAST, stream.PG_TEXT)
#: rows of data a written file holds at most, in Arrow bytes (pyiceberg's writer would take a
#: whole table's worth of files at once: it maps every file of a stream onto its threads)
FILE_BYTES = 128 << 20


def _temporal(t: pa.DataType) -> bool:
    return pa.types.is_temporal(t) or (pa.types.is_list(t) and _temporal(t.value_type))


def _taken(parts: Callable[[Sequence[str] | None], Iterator[pa.Table]], chosen: np.ndarray,
           columns: Sequence[str] | None) -> Iterator[pa.Table]:
    """The batch's changes at the (sorted) positions ``chosen``, part by part."""
    offset = 0
    for part in parts(columns):
        lo, hi = np.searchsorted(chosen, [offset, offset + part.num_rows])
        if hi > lo:
            yield part.take(pa.array(chosen[lo:hi] - offset))
        offset += part.num_rows


def _write(tx: Transaction, table: Table, rows: Iterator[pa.Table]) -> list[DataFile]:
    """``rows`` written as data files of ``tx``'s table, each of at most :data:`FILE_BYTES`:
    one file is written (Parquet's encoding runs without the GIL) while the rows of the next
    are gathered, so at most two files' rows are in memory."""
    write_uuid, counter = uuid.uuid4(), itertools.count()
    files: list[DataFile] = []
    group: list[pa.Table] = []
    size = 0
    with ThreadPoolExecutor(1, thread_name_prefix="cdclake-write") as writer:
        writing: Future[list[DataFile]] | None = None

        def flush() -> None:
            nonlocal writing
            data = pa.concat_tables(group)
            group.clear()
            if writing is not None:
                files.extend(writing.result())
            writing = writer.submit(lambda: list(_dataframe_to_data_files(
                tx.table_metadata, data, table.io, write_uuid, counter)))

        for part in rows:
            if part.num_rows:
                group.append(part)
                size += part.nbytes
            if size >= FILE_BYTES:
                flush()
                size = 0
        if group:
            flush()
        if writing is not None:
            files.extend(writing.result())
    return files
