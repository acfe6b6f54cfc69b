"""What each suite needs to know about a table, and the data frame GX sees.

The suites are the same for every table; what differs is the replica identity (which decides
how an UPDATE/DELETE is identified), the key columns and the text columns. Those come from the
table's :class:`RelationVersion` and its Arrow schema, never from the data, so a broken batch
cannot talk its way out of a check.

Frames carry only the columns some expectation reads: the change stream of a wide table can
be large, and converting its payload columns to pandas would cost memory for nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdclake.catalog.model import (
    IDENTITY_DEFAULT,
    IDENTITY_FULL,
    IDENTITY_INDEX,
    IDENTITY_NOTHING,
    RelationVersion,
)
from cdclake.decoding.stream import COMMIT_LSN, LSN, OLD_KEY, OP, SEQ, SYSTEM_COLUMNS

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


def identity_of(relation: RelationVersion) -> Identity:
    """DEFAULT without a primary key and INDEX without its index log no old key: NOTHING."""
    declared = relation.replident
    if declared in (IDENTITY_DEFAULT, IDENTITY_INDEX):
        keys = tuple(relation.column_by_attnum(a).name for a in relation.key_attnums)
        if keys:
            what = "primary key" if declared == IDENTITY_DEFAULT else "replica identity index"
            return Identity(declared, declared, keys, f"{what} ({', '.join(keys)})")
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


def mirror_parameters(table: str, identity: Identity, schema: pa.Schema) -> dict[str, Any]:
    """Parameters of ``expectations/mirror_table.json`` for one table.

    Only DEFAULT/INDEX tables have a key the lake merges on; FULL and NOTHING tables may hold
    duplicate rows legitimately, so they get no key checks.
    """
    keys = list(identity.key_columns) if identity.effective in ("d", "i") else []
    return {
        "table": table,
        "replica_identity": identity.effective,
        "key_columns": keys,
        "text_columns": text_columns(schema),
    }


def text_columns(schema: pa.Schema) -> list[str]:
    """Source columns that could hold a TOAST placeholder string (key columns included)."""
    return [f.name for f in schema if _is_text(f.type) and f.name not in MIRROR_SYSTEM_COLUMNS]


def _is_text(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        return _is_text(arrow_type.value_type)
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
                or getattr(pa.types, "is_string_view", lambda _t: False)(arrow_type))


def stream_columns(identity: Identity) -> list[str]:
    return [*SYSTEM_COLUMNS, *identity.key_columns]


def mirror_columns(params: dict[str, Any]) -> list[str]:
    return [*params["key_columns"], *params["text_columns"], *MIRROR_SYSTEM_COLUMNS]


def mirror_row_locator(params: dict[str, Any]) -> list[str]:
    """In a mirror the key locates a row, and the commit that wrote it says where to look."""
    return [*params["key_columns"], MIRROR_COMMIT_LSN]


def to_frame(table: pa.Table, columns: Sequence[str]) -> pd.DataFrame:
    """The columns GX needs, in pandas, in the stream's own row order.

    A column the table lacks is left out rather than invented: the suite's column checks then
    fail and name it. Integers never become floats (a nullable integer column becomes Python
    ints and None), so LSNs compare exactly and sample rows print the values as stored.
    """
    wanted = list(dict.fromkeys(c for c in columns if c in table.column_names))
    return table.select(wanted).to_pandas(integer_object_nulls=True)
