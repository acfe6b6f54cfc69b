"""The change stream contract between decoding and the lake (and quality checks).

A batch writes, under ``<prefix>/changes/<batch>/``:

``_manifest.json``
    ``{"batch": str, "start_lsn": int, "end_lsn": int, "commits": int,
    "tables": [{"table": "schema.name", "oid": int, "versions": [
    {"valid_from": int, "relation": RelationVersion.to_json(), "paths": ["<rel path>", ...],
    "rows": int}]}]}`` (paths relative to the batch directory)
    — one entry per relation version that has changes in the batch, in ``valid_from`` order.

``<schema>.<table>/v<valid_from as 16 hex digits>/part-<n>.parquet``
    (at the path the manifest lists: a Spark decode puts them under its lease generation's
    ``g<G>/``, :mod:`cdclake.spark.job`)
    the table's changes made under that relation version, ordered by
    (``_commit_lsn``, ``_lsn``, ``_seq``) — that is, commit order, then WAL order. The rows of
    a table rewrite (``W``, ``R``) are under the version their values have: the one the
    rewriting ALTER TABLE describes, whose ``valid_from`` (its DDL message) comes after them.
    Each enum column's field metadata names the labels of its enum under that version
    (:data:`ENUM_LABELS`).

Each Parquet file has the relation's live columns (typed by :mod:`cdclake.tuples.codecs`; a
column whose value was not logged — an unchanged TOASTed value — is null there and named in
``_unchanged_toast``) followed by the system columns below.

A value its column's Arrow type cannot hold exactly (a 2-D array in a list column, an array
whose lower bound is not 1, NaN in a decimal column, time 24:00:00, a timestamp past int64 µs
since 1970; see docs/lake.md) is null in its typed column and its exact PostgreSQL text —
what test_decoding prints for it — is in ``_cdc_pg_text``, a map keyed by the column's attnum
as a decimal string (attnums survive renames and are never reused). ``_cdc_pg_text`` completes
the tuple the change prints: the new row of an INSERT/UPDATE, the old identity of a DELETE;
it is null when that tuple has no such value. The ``_old_key`` struct carries its own
``_cdc_pg_text`` field for the old identity's values (UPDATE and DELETE alike). An entry
without text (null) is a value cdclake cannot print at all: its type's output function is not
one cdclake knows (:class:`~cdclake.tuples.untypeable.NoTextOutput`); the lake quarantines
the table rather than apply such a change.
"""

from __future__ import annotations

import json

import pyarrow as pa

#: A part holds at most this many rows of a relation version ...
ROWS_PER_PART = 100_000
#: ... and about this many bytes of row data, so wide rows make parts with fewer rows: what a
#: decoder buffers per relation version and what a merge of runs holds are bounded in bytes,
#: whatever a row's width.
BYTES_PER_PART = 16 << 20

COMMIT_LSN = "_commit_lsn"  #: LSN of the transaction's commit record
COMMIT_TS = "_commit_ts"  #: commit timestamp (UTC)
#: microseconds between 1970-01-01 and PostgreSQL's epoch 2000-01-01 (a commit time in WAL
#: counts from the latter, ``_commit_ts`` from the former)
PG_EPOCH_US = 946_684_800_000_000
XID = "_xid"  #: top-level transaction id
LSN = "_lsn"  #: LSN of the record that made the change
#: index of the change inside its record (multi-insert tuples share an LSN); -1 for ``W``
SEQ = "_seq"
#: I insert, U update, D delete, T truncate (data columns null), W/R a table rewrite (below)
OP = "_op"
OLD_KEY = "_old_key"  #: struct of the old identity: key columns, or all columns for FULL
#: the only field of ``_old_key`` for a table without identity (REPLICA IDENTITY NOTHING, or
#: DEFAULT without a primary key): Parquet cannot store a struct with no fields, so such tables
#: get this placeholder, always null, and the column itself is always null
NO_IDENTITY = "_no_identity"
UNCHANGED_TOAST = "_unchanged_toast"  #: names of columns whose (TOASTed) value was not logged
#: attnum (decimal string) -> exact text of each value without a typed representation (null:
#: a value cdclake cannot print); also a field of ``_old_key`` (for the old identity's values)
PG_TEXT = "_cdc_pg_text"
#: the Arrow type of ``_cdc_pg_text``
PG_TEXT_TYPE = pa.map_(pa.string(), pa.string())

OP_INSERT = "I"
OP_UPDATE = "U"
OP_DELETE = "D"
OP_TRUNCATE = "T"
#: a table rewrite (ALTER TABLE that rewrites, REFRESH MATERIALIZED VIEW) begins: the table's
#: rows so far are replaced by the ``R`` rows of the same rewrite that follow (data columns
#: null; ``_seq`` is -1, so it sorts before the rewrite's first row at the same LSN)
OP_REWRITE_BEGIN = "W"
#: a row of the table as the rewrite left it: values PostgreSQL computed in the rewrite (a
#: volatile default, a USING expression, a serial key) that no change ever carried
OP_REWRITE = "R"

SYSTEM_COLUMNS = (COMMIT_LSN, COMMIT_TS, XID, LSN, SEQ, OP, OLD_KEY, UNCHANGED_TOAST, PG_TEXT)


#: field metadata of a column holding enum labels (an enum, a domain over one, an array of
#: either): JSON ``{"<pg_enum oid>": "<label>"}`` as of the relation version, so that the lake
#: can follow ``ALTER TYPE ... RENAME VALUE`` in the values it stored before
ENUM_LABELS = b"cdclake.enum_labels"


def enum_metadata(labels: dict[int, str] | None) -> dict[bytes, bytes] | None:
    """The field metadata for a column with these enum labels (None: not an enum column)."""
    if labels is None:
        return None
    return {ENUM_LABELS: json.dumps({str(k): v for k, v in sorted(labels.items())}).encode()}


def old_key_type(key_fields: list[pa.Field]) -> pa.StructType:
    """The ``_old_key`` struct for these identity columns, then ``_cdc_pg_text`` (a
    placeholder when there are none)."""
    if not key_fields:
        return pa.struct([pa.field(NO_IDENTITY, pa.bool_())])
    return pa.struct([*key_fields, pa.field(PG_TEXT, PG_TEXT_TYPE)])


def system_fields(old_key_type: pa.StructType) -> list[pa.Field]:
    """The system columns appended after a table's own columns."""
    return [
        pa.field(COMMIT_LSN, pa.int64(), nullable=False),
        pa.field(COMMIT_TS, pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field(XID, pa.int64(), nullable=False),
        pa.field(LSN, pa.int64(), nullable=False),
        pa.field(SEQ, pa.int32(), nullable=False),
        pa.field(OP, pa.string(), nullable=False),
        pa.field(OLD_KEY, old_key_type, nullable=True),
        pa.field(UNCHANGED_TOAST, pa.list_(pa.string()), nullable=True),
        pa.field(PG_TEXT, PG_TEXT_TYPE, nullable=True),
    ]
