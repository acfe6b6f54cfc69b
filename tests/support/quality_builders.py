"""Change streams and mirrors built with pyarrow, good and deliberately broken.

They follow the contract in :mod:`cdclake.decoding.stream` (system columns, types, order) so
the suites see what the decoder will write; each broken variant breaks exactly one rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from cdclake.catalog.model import Column, RelationVersion
from cdclake.decoding.stream import system_fields

_TYPES: dict[int, tuple[pa.DataType, int, str, bool]] = {
    23: (pa.int32(), 4, "i", True),
    20: (pa.int64(), 8, "d", True),
    25: (pa.string(), -1, "i", False),
}
BASE_TS_US = 1_700_000_000_000_000
#: LSNs past 2**53: a float anywhere on the way would merge neighbours.
BIG = 1 << 60


def relation(name: str = "public.orders", replident: str = "d",
             columns: Sequence[tuple[str, int]] = (("id", 23), ("note", 25)),
             key: Sequence[str] = ("id",), oid: int = 16500) -> RelationVersion:
    schema, table = name.split(".")
    cols = tuple(
        Column(attnum=i, name=n, quoted=n, type_oid=t, typmod=-1, attlen=_TYPES[t][1],
               attalign=_TYPES[t][2], attbyval=_TYPES[t][3], not_null=n in key)
        for i, (n, t) in enumerate(columns, start=1)
    )
    attnums = tuple(c.attnum for c in cols if c.name in key)
    return RelationVersion(oid=oid, db_oid=5, tablespace=1663, relfilenode=oid, schema=schema,
                           name=table, qualified=name, relkind="r", persistence="p",
                           replident=replident, columns=cols, key_attnums=attnums)


def arrow_type(rel: RelationVersion, name: str) -> pa.DataType:
    col = next(c for c in rel.columns if c.name == name)
    return _TYPES[col.type_oid][0]


def old_key_type(rel: RelationVersion) -> pa.StructType:
    if rel.replident == "f":
        names = [c.name for c in rel.live_columns()]
    else:
        names = [rel.column_by_attnum(a).name for a in rel.key_attnums]
    return pa.struct([(n, arrow_type(rel, n)) for n in names])


@dataclass
class Change:
    op: str
    commit_lsn: int
    lsn: int
    values: dict[str, Any] = field(default_factory=dict)
    old_key: dict[str, Any] | None = None
    seq: int = 0
    xid: int | None = None
    unchanged_toast: list[str] | None = None


def stream(rel: RelationVersion, changes: Sequence[Change]) -> pa.Table:
    """The Parquet content of one table's changes, rows in the order given."""
    live = [c.name for c in rel.live_columns()]
    data: dict[str, pa.Array] = {
        n: pa.array([ch.values.get(n) for ch in changes], arrow_type(rel, n)) for n in live
    }
    sysf = {f.name: f for f in system_fields(old_key_type(rel))}
    data["_commit_lsn"] = pa.array([c.commit_lsn for c in changes], pa.int64())
    data["_commit_ts"] = pa.array([BASE_TS_US + c.commit_lsn % 10**9 for c in changes],
                                  sysf["_commit_ts"].type)
    data["_xid"] = pa.array([c.xid if c.xid is not None else 700 + c.commit_lsn % 1000
                             for c in changes], pa.int64())
    data["_lsn"] = pa.array([c.lsn for c in changes], pa.int64())
    data["_seq"] = pa.array([c.seq for c in changes], pa.int32())
    data["_op"] = pa.array([c.op for c in changes], pa.string())
    data["_old_key"] = pa.array([c.old_key for c in changes], sysf["_old_key"].type)
    data["_unchanged_toast"] = pa.array([c.unchanged_toast for c in changes],
                                        pa.list_(pa.string()))
    return pa.table(data)


def good_changes(base: int = BIG) -> list[Change]:
    """Three transactions touching every op: a multi-insert, key-keeping and key-changing
    updates, a delete, a truncate; LSNs past 2**53."""
    return [
        # txn 1: multi-insert of three rows in one record (shared _lsn, _seq 0..2)
        Change("I", base + 500, base + 100, {"id": 1, "note": "a"}, seq=0),
        Change("I", base + 500, base + 100, {"id": 2, "note": "b"}, seq=1),
        Change("I", base + 500, base + 100, {"id": 3, "note": "c"}, seq=2),
        Change("U", base + 500, base + 101, {"id": 1, "note": "a2"}),  # key kept: no old key
        # txn 2
        Change("U", base + 900, base + 600, {"id": 20, "note": "b"}, old_key={"id": 2}),
        Change("D", base + 900, base + 601, old_key={"id": 3}),
        Change("U", base + 900, base + 602, {"id": 1, "note": None},
               unchanged_toast=["note"]),
        # txn 3, same commit LSN neighbourhood but a later commit
        Change("T", base + 1000, base + 950),
    ]


def full_changes(base: int = BIG) -> list[Change]:
    """REPLICA IDENTITY FULL: every UPDATE and DELETE carries the whole old row."""
    return [
        Change("I", base + 50, base + 10, {"id": 1, "note": "a"}),
        Change("U", base + 50, base + 20, {"id": 1, "note": "b"},
               old_key={"id": 1, "note": "a"}),
        Change("D", base + 90, base + 60, old_key={"id": 1, "note": None}),
    ]


def without_key(rel: RelationVersion, replident: str) -> RelationVersion:
    return replace(rel, replident=replident, key_attnums=())


def unkeyed_changes(base: int = BIG) -> list[Change]:
    """A NOTHING table: two updates and one delete, none with an old key."""
    return [
        Change("I", base + 50, base + 10, {"id": 1, "note": "a"}),
        Change("U", base + 50, base + 20, {"id": 1, "note": "b"}),
        Change("U", base + 90, base + 60, {"id": 1, "note": "c"}),
        Change("D", base + 90, base + 70),
    ]


def mirror(rel: RelationVersion, rows: Sequence[dict[str, Any]],
           text_type: pa.DataType | None = None) -> pa.Table:
    """A mirror table as read back from Iceberg: source columns plus ``_cdc_*``."""
    text_type = text_type or pa.string()
    data: dict[str, pa.Array] = {}
    for col in rel.live_columns():
        t = arrow_type(rel, col.name)
        data[col.name] = pa.array([r.get(col.name) for r in rows],
                                  text_type if pa.types.is_string(t) else t)
    data["_cdc_commit_lsn"] = pa.array([r.get("_cdc_commit_lsn", BIG + i)
                                        for i, r in enumerate(rows)], pa.int64())
    data["_cdc_commit_ts"] = pa.array([BASE_TS_US + i for i in range(len(rows))],
                                      pa.timestamp("us", tz="UTC"))
    return pa.table(data)
