"""Replica identity as PostgreSQL applies it, and the frames GX sees."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from cdclake.quality import inputs
from tests.support import quality_builders as builders


@pytest.mark.parametrize(("replident", "keys", "effective", "reason"), [
    ("d", ("id",), "d", "primary key (id)"),
    ("i", ("id", "note"), "i", "replica identity index (id, note)"),
    ("d", (), "n", "REPLICA IDENTITY DEFAULT without a primary key"),
    ("i", (), "n", "REPLICA IDENTITY USING INDEX, no index"),
    ("f", (), "f", "REPLICA IDENTITY FULL (whole old row)"),
    ("n", (), "n", "REPLICA IDENTITY NOTHING"),
])
def test_effective_identity(replident: str, keys: tuple[str, ...], effective: str,
                            reason: str) -> None:
    ident = inputs.identity_of(builders.relation(replident=replident, key=keys))
    assert (ident.declared, ident.effective, ident.key_columns, ident.reason) == (
        replident, effective, keys, reason)


def test_unknown_replident_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown relreplident 'x'"):
        inputs.identity_of(replace(builders.relation(), replident="x"))


def test_text_columns_cover_iceberg_string_types_but_not_system_columns() -> None:
    schema = pa.schema([
        ("id", pa.int32()), ("a", pa.string()), ("b", pa.large_string()),
        ("c", pa.dictionary(pa.int32(), pa.string())), ("d", pa.binary()),
        ("_cdc_commit_lsn", pa.int64()), ("_cdc_commit_ts", pa.string()),
    ])
    assert inputs.text_columns(schema) == ["a", "b", "c"]


def test_frame_keeps_big_lsns_exact_and_nullable_ints_as_ints() -> None:
    big = builders.BIG
    table = pa.table({
        "_lsn": pa.array([big, big + 1], pa.int64()),
        "id": pa.array([7, None], pa.int32()),
        "other": pa.array(["x", "y"]),
    })
    frame = inputs.to_frame(table, ["_lsn", "id", "_not_there"])
    assert list(frame.columns) == ["_lsn", "id"]
    assert str(frame["_lsn"].dtype) == "int64"
    assert frame["_lsn"].tolist() == [big, big + 1]
    assert frame["id"].tolist() == [7, None]


def test_stream_columns_are_system_columns_then_keys() -> None:
    ident = inputs.identity_of(builders.relation(key=("id",)))
    cols = inputs.stream_columns(ident)
    assert cols[-1] == "id" and "_commit_lsn" in cols and "note" not in cols
