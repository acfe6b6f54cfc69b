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

Memory is O(the system and key columns of the table's changes in the batch + a file being
written): neither the changes' values, the mirror nor a stored file is held whole.
:func:`takes` says whether a table's batch qualifies; :func:`merge` answers ``None`` when the
mirror itself needs the replay (a label renamed, a type no promotion holds).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table, Transaction

from cdclake.decoding import stream
from cdclake.errors import LakeError
from cdclake.lake import labels
from cdclake.lake.apply import Counts
from cdclake.lake.batch import Batch, TableEntry
from cdclake.lake.changes import KEY, VersionInfo
from cdclake.lake.metrics import guard_metrics
from cdclake.lake.region import MAX_FILTER_KEYS, column_filter, combine, filter_limit
from cdclake.lake.retype import evolved_columns
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    apply_evolution,
    arrow_type,
    mirror_fields,
    mirror_system_fields,
    plan_evolution,
)
from cdclake.lake.tables import row_count
from cdclake.lake.visibility import SnapshotFacts, in_snapshot_arrow
from cdclake.wal.lsn import format_lsn

_OPS = {stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE, stream.OP_TRUNCATE}
_SETS = pa.array([stream.OP_INSERT, stream.OP_UPDATE])
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
    """A table's batch as the Arrow merge reads it: the narrow columns of every change, and
    the whole rows, read again part by part for the rows that end up in the mirror."""

    info: VersionInfo
    data: pa.Table  #: the stream's system columns and the key, every change in order
    parts: Callable[[Sequence[str] | None], Iterator[pa.Table]]  #: all columns, or these


def takes(batch: Batch, entry: TableEntry) -> Changes | None:
    """``entry``'s changes of ``batch`` when they qualify (the same columns, key and labels in
    every version with changes — a TRUNCATE's new relfilenode is a version of its own — a key
    of plain types, only INSERT/UPDATE/DELETE/TRUNCATE, every value typed, no unchanged
    TOAST, every DELETE naming its key); else None: the replay takes them."""
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
    if any(a not in by_attnum or not any(ok(info.arrow_schema.field(by_attnum[a]).type)
                                         for ok in _KEY_TYPES)
           for a in info.identity.attnums):
        return None

    def parts(columns: Sequence[str] | None = None) -> Iterator[pa.Table]:
        for v in versions:  # the positions :func:`merge` takes rows at: in this order
            yield from batch.parts(entry, v, columns)

    narrow = [*_SYSTEM, *(by_attnum[a] for a in info.identity.attnums)]
    tables = [pa.concat_tables(batch.parts(entry, v, narrow)) for v in versions]
    for v, t in zip(versions, tables, strict=True):
        _check_order(t, f"batch {batch.name}, table {entry.table}, version "
                        f"v{v.relation.valid_from:X}")
    data = pa.concat_tables(tables)
    data = data.append_column(_POS, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    if len(tables) > 1:  # the versions' changes in the source's order
        data = data.take(pc.sort_indices(data, [(c, "ascending") for c in _ORDER]))
    ops = set(pc.unique(data.column(stream.OP)).to_pylist())
    if not ops <= _OPS:
        return None  # a rewrite, or an unknown op the replay reports
    if data.column(stream.PG_TEXT).null_count != data.num_rows:
        return None
    toast = data.column(stream.UNCHANGED_TOAST)
    if pc.max(pc.fill_null(pc.list_value_length(toast), 0)).as_py() or 0:
        return None
    old = data.column(stream.OLD_KEY)
    deletes = pc.equal(data.column(stream.OP), stream.OP_DELETE)
    if pc.any(pc.and_(deletes, old.is_null())).as_py():
        return None  # malformed: the replay says so
    if stream.PG_TEXT in {f.name for f in old.type}:
        texts = pc.struct_field(old, stream.PG_TEXT)
        if texts.null_count != len(texts):
            return None
    # checked: what the merge does not read is not held (a bulk load's batch holds millions)
    return Changes(info, data.drop_columns([stream.LSN, stream.SEQ, stream.UNCHANGED_TOAST,
                                            stream.PG_TEXT]), parts)


def merge(table: Table, source: Changes, *, name: str, stored: int | None,
          facts: SnapshotFacts | None, properties: Mapping[str, str],
          max_keys: int = MAX_FILTER_KEYS) -> Outcome | None:
    """Apply ``source`` (:func:`takes` said yes) to the mirror ``table`` in one commit whose
    snapshot carries ``properties``; None when the mirror needs the replay (nothing was
    written)."""
    info, data = source.info, source.data
    stored_enums = labels.stored_labels(table.metadata.properties)
    enums = labels.combine([stored_enums, info.labels])
    columns, retyped = evolved_columns(table.schema(), name, [info.columns])
    if retyped or labels.translation(stored_enums, enums) or labels.translation(info.labels,
                                                                                enums):
        return None
    seen = pc.is_valid(data.column(stream.COMMIT_LSN)) if stored is None else pc.greater(
        data.column(stream.COMMIT_LSN), stored)
    wanted = seen if facts is None else pc.and_(seen, pc.invert(in_snapshot_arrow(
        facts, data.column(stream.COMMIT_LSN), data.column(stream.XID))))
    pending = data if pc.all(wanted).as_py() else data.filter(wanted)
    at = pending.column(_POS)  # where each pending change is in the batch
    unseen = pc.sum(pc.cast(seen, pa.int64())).as_py() or 0
    skipped = (data.num_rows - unseen, unseen - pending.num_rows)
    counts = Counts()
    if pending.num_rows == 0:
        return Outcome(counts, 0, *skipped, 0, "none", [])
    names = {stream.OP_INSERT: "inserted", stream.OP_UPDATE: "updated",
             stream.OP_DELETE: "deleted", stream.OP_TRUNCATE: "truncated"}
    for entry in pc.value_counts(pending.column(stream.OP)).to_pylist():
        setattr(counts, names[entry["values"]], entry["counts"])

    evolution = plan_evolution(table.schema(), columns, name, mirror_system_fields())
    tx = table.transaction()
    apply_evolution(tx, evolution)
    if enums != stored_enums:
        tx.set_properties({labels.PROPERTY: labels.property_value(enums)})
    schema = tx.table_metadata.schema()
    fields = mirror_fields(schema, name)
    attnums = info.identity.attnums
    keys = [fields[a].name for a in attnums]  # the mirror's names, as the commit leaves them
    key_types = [_plain(arrow_type(fields[a].field_type)) for a in attnums]
    by_attnum = {c.attnum: c.name for c in info.columns}

    truncates = pc.indices_nonzero(pc.equal(pending.column(stream.OP), stream.OP_TRUNCATE))
    first = truncates[-1].as_py() + 1 if len(truncates) else 0
    changes, at = pending.slice(first), at.slice(first)
    events = _events(changes, [by_attnum[a] for a in attnums], keys, key_types)
    last = _last_events(events, keys)
    touched = last.select(keys)
    sets = pc.shift_right(last.filter(pc.equal(pc.bit_wise_and(last.column("_ev"), 1), 1))
                          .column("_ev"), 1)
    chosen = np.sort(at.take(sets).to_numpy())  # the changes whose rows the mirror gets
    target = _target(schema)
    temporal = [f.name for f in target if _temporal(f.type) and f.name in info.names]
    for part in _taken(source.parts, chosen, temporal) if temporal else ():
        guard_metrics(tx, part)  # before any file is written: it sets how they are

    snap = table.current_snapshot()
    strategy = "append" if snap is None else "region"
    rewritten: list[FileScanTask] = []
    in_mirror = touched.slice(0, 0)
    if len(truncates):
        strategy = "truncate"
        deleted = [t.file for t in table.scan().plan_files()]
    else:
        region = _region(table, name, attnums, touched, max_keys)
        if snap is not None and region == AlwaysTrue():
            strategy = "full-scan"
        stored_keys = ArrowScan(tx.table_metadata, table.io, schema.select(*keys),
                                AlwaysTrue())
        found = []
        for task in table.scan(row_filter=region).plan_files() if snap is not None else ():
            hit = _semi_join(_cast(stored_keys.to_table([task]), key_types), touched, keys)
            if hit.num_rows:
                rewritten.append(task)
                found.append(hit)
        deleted = [t.file for t in rewritten]
        if found:
            in_mirror = pa.concat_tables(found)
    counts.not_found = _not_found(changes, events, keys, key_types, by_attnum, attnums,
                                  in_mirror)

    kept = ArrowScan(tx.table_metadata, table.io, schema, AlwaysTrue())

    def rows() -> Iterator[pa.Table]:
        for task in rewritten:  # a file at a time, a record batch at a time
            for part in kept.to_record_batches([task]):
                stored_rows = pa.Table.from_batches([part])
                index = pa.array(range(stored_rows.num_rows), pa.int64())
                hit = _semi_join(_cast(stored_rows.select(keys), key_types).append_column(
                    "_i", index), touched, keys)
                keep = pc.invert(pc.is_in(index, value_set=hit.column("_i")))
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
    return Outcome(counts, pending.num_rows, *skipped, sum(f.record_count for f in files),
                   strategy, [c.describe() for c in evolution],
                   snap.snapshot_id if snap else None)


def _check_order(data: pa.Table, where: str) -> None:
    """The replay's rule: a version's rows not in (commit LSN, LSN, seq) order are refused."""
    if data.num_rows < 2:
        return
    c, lsn, seq = (data.column(x) for x in (stream.COMMIT_LSN, stream.LSN, stream.SEQ))
    n = data.num_rows
    a = [x.slice(0, n - 1) for x in (c, lsn, seq)]
    b = [x.slice(1) for x in (c, lsn, seq)]
    back = pc.or_(pc.less(b[0], a[0]), pc.and_(pc.equal(b[0], a[0]), pc.or_(
        pc.less(b[1], a[1]), pc.and_(pc.equal(b[1], a[1]), pc.less(b[2], a[2])))))
    bad = pc.indices_nonzero(back)
    if len(bad):
        i = bad[0].as_py() + 1
        raise LakeError(f"{where}: rows are not in commit/WAL order at LSN "
                        f"{format_lsn(lsn[i].as_py())} (commit {format_lsn(c[i].as_py())})")


def _plain(t: pa.DataType) -> pa.DataType:
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
    index + 1 if it sets the key's row (INSERT, UPDATE), + 0 if it takes it (DELETE, and the
    old key of a key-changing UPDATE)."""
    op = changes.column(stream.OP)
    index = pa.array(range(changes.num_rows), pa.int64())
    new = [changes.column(n).cast(t) for n, t in zip(names, types, strict=True)]
    old = [pc.struct_field(changes.column(stream.OLD_KEY), n).cast(t)
           for n, t in zip(names, types, strict=True)]
    sets = pc.is_in(op, value_set=_SETS)
    moved = pc.and_(pc.equal(op, stream.OP_UPDATE), _differs(old, new))
    takes = pc.or_(pc.equal(op, stream.OP_DELETE), moved)
    ev = pc.multiply(index, 2)
    parts = [pa.table([*(c.filter(sets) for c in new), pc.add(ev, 1).filter(sets)],
                      names=[*keys, "_ev"]),
             pa.table([*(c.filter(takes) for c in old), ev.filter(takes)],
                      names=[*keys, "_ev"])]
    return pa.concat_tables(parts)


def _differs(old: Sequence[pa.ChunkedArray], new: Sequence[pa.ChunkedArray]) -> pa.Array:
    """Rows whose old key was logged and is not the new one."""
    out = None
    for o, n in zip(old, new, strict=True):
        ne = pc.fill_null(pc.not_equal(o, n), False)
        out = ne if out is None else pc.or_(out, ne)
    return pc.and_(pc.is_valid(old[0]), out)


def _last_events(events: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per key, its last event."""
    out = events.group_by(list(keys), use_threads=False).aggregate([("_ev", "max")])
    return out.select(list(keys)).append_column("_ev", out.column("_ev_max"))


def _semi_join(rows: pa.Table, keys_of: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows of ``rows`` whose key is one of ``keys_of``."""
    return rows.join(keys_of, list(keys), join_type="left semi", use_threads=False)


def _region(table: Table, name: str, attnums: Sequence[int], touched: pa.Table,
            max_keys: int) -> BooleanExpression:
    """A metrics filter for the data files that can hold a touched key (a superset: it only
    prunes), as :mod:`cdclake.lake.region` makes one: on each integer or text key column, as
    the mirror names it before this commit; every file past the region's limit of keys."""
    fields = mirror_fields(table.schema(), name)
    if touched.num_rows > filter_limit(max_keys, row_count(table)):
        return AlwaysTrue()
    terms = [column_filter(fields[a], set(col.to_pylist()))
             for a, col in zip(attnums, touched.columns, strict=True)
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


def _not_found(changes: pa.Table, events: pa.Table, keys: Sequence[str],
               types: Sequence[pa.DataType], by_attnum: Mapping[int, str],
               attnums: Sequence[int], in_mirror: pa.Table) -> int:
    """The UPDATEs and DELETEs whose row was not there: the key they look up (the old key
    when logged, else the new one) was last taken in the batch, or — when the batch had not
    touched it before — is not among the mirror's keys ``in_mirror``."""
    op = changes.column(stream.OP)
    names = [by_attnum[a] for a in attnums]
    looks = pc.is_in(op, value_set=pa.array([stream.OP_UPDATE, stream.OP_DELETE]))
    if not pc.any(looks).as_py():
        return 0
    old_struct = changes.column(stream.OLD_KEY)
    logged = pc.is_valid(old_struct)
    lookup = [pc.if_else(logged, pc.struct_field(old_struct, n).cast(t),
                         changes.column(n).cast(t)).filter(looks)
              for n, t in zip(names, types, strict=True)]
    index = pa.array(range(changes.num_rows), pa.int64())
    state = pa.int8()
    records = pa.concat_tables([
        pa.table([*lookup, pc.multiply(index.filter(looks), 2),
                  pa.nulls(len(lookup[0]), state)], names=[*keys, "_ord", "_state"]),
        pa.table([*events.select(keys).columns, pc.add(pc.bit_wise_and(
            events.column("_ev"), pa.scalar(-2, pa.int64())), 1),
            pc.bit_wise_and(events.column("_ev"), 1).cast(state)],
            names=[*keys, "_ord", "_state"]),
    ]).sort_by([(k, "ascending") for k in keys] + [("_ord", "ascending")]).combine_chunks()
    n = records.num_rows
    first = pa.array([True] + [False] * (n - 1))  # where each key's records begin
    for k in keys:
        col = records.column(k).chunk(0)
        first = pc.or_(first, pa.concat_arrays(
            [pa.array([True]), pc.not_equal(col.slice(1), col.slice(0, n - 1))]))
    mirror = pa.scalar(2, state)  # before a key's first event: the mirror's row, if any
    own = records.column("_state").chunk(0)
    marked = pc.fill_null_forward(pc.if_else(pc.and_(first, pc.is_null(own)), mirror, own))
    prior = pc.if_else(first, mirror,
                       pa.concat_arrays([pa.array([2], state), marked.slice(0, n - 1)]))
    lookups = pc.is_null(own)
    from_mirror = records.select(keys).filter(pc.and_(lookups, pc.equal(prior, 2)))
    absent = from_mirror.num_rows - _semi_join(from_mirror, in_mirror, keys).num_rows
    taken = pc.sum(pc.and_(lookups, pc.equal(prior, 0)).cast(pa.int64())).as_py() or 0
    return absent + taken


#: the source's order of changes
_ORDER = (stream.COMMIT_LSN, stream.LSN, stream.SEQ)
#: a change's position in the batch (its versions' parts in order), beside the narrow columns
_POS = "_cdclake_pos"
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
    """``rows`` written as data files of ``tx``'s table, at most :data:`FILE_BYTES` of them
    in memory at a time."""
    write_uuid, counter = uuid.uuid4(), itertools.count()
    files: list[DataFile] = []
    group: list[pa.Table] = []
    size = 0

    def flush() -> None:
        files.extend(_dataframe_to_data_files(tx.table_metadata, pa.concat_tables(group),
                                              table.io, write_uuid, counter))
        group.clear()

    for part in rows:
        if part.num_rows:
            group.append(part)
            size += part.nbytes
        if size >= FILE_BYTES:
            flush()
            size = 0
    if group:
        flush()
    return files
