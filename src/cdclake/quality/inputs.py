"""What each suite needs to know about a table, and the data frame GX sees.

The suites are the same for every table; what differs is the replica identity (which decides
how an UPDATE/DELETE is identified), the key columns and the text columns. Those come from the
table's :class:`RelationVersion` and its Arrow schema, never from the data, so a broken batch
cannot talk its way out of a check.

Frames carry only the columns some expectation reads: the change stream of a wide table can
be large, and converting its payload columns to pandas would cost memory for nothing.

Two kinds of edge values must not make a check fail or crash (docs/lake.md): a key value kept
as exact text (NULL in its typed column, text in ``_cdc_pg_text``) is a present key, so the
frame's key columns take that text; and dates/times pandas cannot hold as Python objects
(±infinity, BC, years past 9999) are compared as their storage integers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from cdclake.catalog.model import (
    IDENTITY_DEFAULT,
    IDENTITY_FULL,
    IDENTITY_INDEX,
    IDENTITY_NOTHING,
    RelationVersion,
)
from cdclake.decoding.stream import (
    COMMIT_LSN,
    LSN,
    OLD_KEY,
    OP,
    OP_DELETE,
    PG_TEXT,
    SEQ,
    SYSTEM_COLUMNS,
)

if TYPE_CHECKING:
    import pandas as pd

MIRROR_COMMIT_LSN = "_cdc_commit_lsn"
MIRROR_COMMIT_TS = "_cdc_commit_ts"
MIRROR_SYSTEM_COLUMNS = (MIRROR_COMMIT_LSN, MIRROR_COMMIT_TS)

#: Columns that locate a change in the stream: printed for every failing row.
STREAM_ROW_LOCATOR = (COMMIT_LSN, LSN, SEQ)


@dataclass(frozen=True, slots=True)
class Identity:
    """The replica identity PostgreSQL actually applies to a table's updates and deletes."""

    declared: str  #: relreplident as captured
    effective: str  #: d, i, f, or n when nothing identifies a row
    key_columns: tuple[str, ...]
    reason: str  #: why the effective identity is what it is, for reports
    key_attnums: tuple[int, ...] = ()  #: attnums of ``key_columns`` (``_cdc_pg_text`` keys)


def identity_of(relation: RelationVersion) -> Identity:
    """DEFAULT without a primary key and INDEX without its index log no old key: NOTHING."""
    declared = relation.replident
    if declared in (IDENTITY_DEFAULT, IDENTITY_INDEX):
        keys = tuple(relation.column_by_attnum(a).name for a in relation.key_attnums)
        if keys:
            what = "primary key" if declared == IDENTITY_DEFAULT else "replica identity index"
            return Identity(declared, declared, keys, f"{what} ({', '.join(keys)})",
                            tuple(relation.key_attnums))
        reason = ("REPLICA IDENTITY DEFAULT without a primary key"
                  if declared == IDENTITY_DEFAULT else "REPLICA IDENTITY USING INDEX, no index")
        return Identity(declared, IDENTITY_NOTHING, (), reason)
    if declared == IDENTITY_FULL:
        return Identity(declared, IDENTITY_FULL, (), "REPLICA IDENTITY FULL (whole old row)")
    if declared == IDENTITY_NOTHING:
        return Identity(declared, IDENTITY_NOTHING, (), "REPLICA IDENTITY NOTHING")
    raise ValueError(f"{relation.qualified}: unknown relreplident {declared!r}")


def stream_parameters(table: str, identity: Identity) -> dict[str, Any]:
    """Parameters of ``expectations/change_stream.json`` for one table."""
    return {
        "table": table,
        "replica_identity": identity.effective,
        "declared_replica_identity": identity.declared,
        "identity_reason": identity.reason,
        "key_columns": list(identity.key_columns),
        "identity_columns": [OP, OLD_KEY, *identity.key_columns],
    }


def mirror_parameters(table: str, identity: Identity, schema: pa.Schema | Any,
                      inexact: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parameters of ``expectations/mirror_table.json`` for one table; ``inexact``: the
    mirror's mark (:mod:`cdclake.lake.inexact`), when the merge left changes unapplied.

    Only DEFAULT/INDEX tables have a key the lake merges on; FULL and NOTHING tables may hold
    duplicate rows legitimately, so they get no key checks.
    """
    keys = list(identity.key_columns) if identity.effective in ("d", "i") else []
    return {
        "table": table,
        "replica_identity": identity.effective,
        "key_columns": keys,
        "text_columns": text_columns(schema),
        "not_applied": int((inexact or {}).get("not_applied") or 0),
        "differs_since": str((inexact or {}).get("since_lsn") or ""),
    }


def text_columns(schema: pa.Schema | Any) -> list[str]:
    """Source columns that could hold a TOAST placeholder string (key columns included); of
    an Arrow schema or a Spark one (``StructType``)."""
    if not isinstance(schema, pa.Schema):
        return [f.name for f in schema.fields
                if f.dataType.typeName() == "string" and f.name not in MIRROR_SYSTEM_COLUMNS]
    return [f.name for f in schema if _is_text(f.type) and f.name not in MIRROR_SYSTEM_COLUMNS]


def _is_text(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        return _is_text(arrow_type.value_type)
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
                or getattr(pa.types, "is_string_view", lambda _t: False)(arrow_type))


def stream_columns(of: Identity | RelationVersion) -> list[str]:
    """The columns the change-stream suite reads: the system columns and the key."""
    identity = of if isinstance(of, Identity) else identity_of(of)
    return [*SYSTEM_COLUMNS, *identity.key_columns]


def mirror_columns(params: dict[str, Any]) -> list[str]:
    return [*params["key_columns"], *params["text_columns"], *MIRROR_SYSTEM_COLUMNS,
            PG_TEXT]


def mirror_row_locator(params: dict[str, Any]) -> list[str]:
    """In a mirror the key locates a row, and the commit that wrote it says where to look."""
    return [*params["key_columns"], MIRROR_COMMIT_LSN]


def to_frame(table: pa.Table, columns: Sequence[str],
             identity: Identity | None = None) -> pd.DataFrame:
    """The columns GX needs, in pandas, in the stream's own row order.

    A column the table lacks is left out rather than invented: the suite's column checks then
    fail and name it. Integers never become floats (a nullable integer column becomes Python
    ints and None), so LSNs compare exactly and sample rows print the values as stored. With
    ``identity``, key values kept as exact text (``_cdc_pg_text``) fill their key columns, in
    the row and in ``_old_key``.
    """
    wanted = list(dict.fromkeys(c for c in columns if c in table.column_names))
    selected = table.select(wanted)
    exact = identity is not None and bool(identity.key_columns) and _has_texts(selected)
    frame = pa.Table.from_arrays([_pandas_safe(c) for c in selected.columns],
                                 names=selected.column_names).to_pandas(
        integer_object_nulls=True, types_mapper=None if exact else _as_arrow)
    if exact:
        assert identity is not None
        _fill_exact_keys(frame, identity)
    return frame


def _as_arrow(t: pa.DataType) -> Any:
    """Structs, maps, lists and strings stay Arrow in pandas (``pd.ArrowDtype``): a row's
    ``_old_key``, ``_unchanged_toast`` or text becomes a Python object only if a check prints
    that row, not for every row of a million-row chunk."""
    import pandas as pd

    return pd.ArrowDtype(t) if pa.types.is_nested(t) or _is_text(t) else None


def _has_texts(table: pa.Table) -> bool:
    """Whether some row keeps a value as exact text, in the row or in its old key
    (``_cdc_pg_text``): only then are key columns filled from texts, row by row."""
    def some(texts: pa.ChunkedArray) -> bool:  # a map's entries, counted by its offsets
        return any(len(c) and c.offsets[-1].as_py() > c.offsets[0].as_py()
                   for c in texts.chunks)

    if PG_TEXT in table.column_names and some(table.column(PG_TEXT)):
        return True
    if OLD_KEY not in table.column_names:
        return False
    old = table.column(OLD_KEY)
    return pa.types.is_struct(old.type) and old.type.get_field_index(PG_TEXT) >= 0 and some(
        pc.struct_field(old, PG_TEXT))


def _fill_exact_keys(frame: pd.DataFrame, identity: Identity) -> None:
    import pandas as pd

    keys = list(zip(identity.key_columns, (str(a) for a in identity.key_attnums), strict=True))
    deletes = (frame[OP] == OP_DELETE).tolist() if OP in frame.columns else [False] * len(frame)
    texts = [dict(t) if t is not None and len(t) else {} for t in frame[PG_TEXT].tolist()]
    for name, attnum in keys:
        if name in frame.columns and any(attnum in t for t in texts):
            # object dtype: a key column now mixes typed values, texts and None
            frame[name] = pd.Series(
                [_present(t[attnum]) if _missing(v) and attnum in t and not d else v
                 for v, t, d in zip(frame[name].tolist(), texts, deletes, strict=True)],
                index=frame.index, dtype=object)
    if OLD_KEY in frame.columns:
        frame[OLD_KEY] = pd.Series([_exact_old_key(old, keys) for old in frame[OLD_KEY]],
                                   index=frame.index, dtype=object)


def _exact_old_key(old: Any, keys: list[tuple[str, str]]) -> Any:
    if not isinstance(old, dict) or not old.get(PG_TEXT):
        return old
    texts = dict(old[PG_TEXT])
    return {**old, **{name: _present(texts[attnum]) for name, attnum in keys
                      if old.get(name) is None and attnum in texts}}


#: a key value the decoder could not print (an entry without text): the WAL has it, which is
#: what the suite checks; the lake quarantines its table (cdclake.lake.quarantine)
UNPRINTED_KEY = "<a value cdclake cannot print>"


def _present(text: str | None) -> str:
    return UNPRINTED_KEY if text is None else text


def _missing(value: Any) -> bool:
    """A null as pandas gives it: None, or NaN in a column of nothing but nulls."""
    return value is None or (isinstance(value, float) and value != value)


#: what Python's date/datetime hold, in Arrow storage units (days, µs since 1970)
_PY_DATES = (-719_162, 2_932_896)
_PY_TIMESTAMPS = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def _pandas_safe(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column, with dates and timestamps as their storage integers where pandas would go
    through Python objects that cannot hold them: always inside structs (``_old_key`` becomes
    dicts), and in a top-level column only when a value lies outside years 1..9999."""
    t = column.type
    if pa.types.is_struct(t):
        storage = _storage_type(t)
        return column if storage == t else column.cast(storage)
    if pa.types.is_date32(t) or pa.types.is_timestamp(t) or pa.types.is_time64(t):
        lo, hi = _PY_DATES if pa.types.is_date32(t) else _PY_TIMESTAMPS
        ints = column.cast(pa.int32() if pa.types.is_date32(t) else pa.int64())
        if column.null_count < len(column):
            bounds = pc.min_max(ints)
            if bounds["min"].as_py() < lo or bounds["max"].as_py() > hi:
                return ints
    return column


def _storage_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(_storage_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _storage_type(f.type), f.nullable) for f in t])
    return t
