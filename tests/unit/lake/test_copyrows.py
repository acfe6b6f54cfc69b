"""COPY text rows -> a mirror data file's Arrow table, without a server.

The values must be those the merge stores for the same rows coming through the change stream:
storage integers for temporal values (BC, ±infinity included), NULL plus the exact text in
``_cdc_pg_text`` for a value its column cannot hold, safe casts to a promoted mirror column,
NULL for columns the relation does not have (and for virtual generated ones), and the mirror's
field ids in the file schema.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
    UUIDType,
)

from cdclake.catalog.model import Column, RelationVersion
from cdclake.errors import LakeError
from cdclake.lake.copyrows import SESSION_SETTINGS, CopyRows, counts_only_columns, quote_ident
from cdclake.lake.rows import table_of
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    attnum_doc,
    mirror_system_fields,
)
from cdclake.lake.values import PgText
from tests.unit.tuples.builtin_types import BUILTIN

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
NUMERIC_10_2 = ((10 << 16) | 2) + 4
COMMIT_LSN = 0x1_2345_6789
COMMIT_TS = 1_717_236_000_123_456  # 2024-06-01 10:00:00.123456 UTC


def _col(attnum: int, name: str, type_oid: int, *, typmod: int = -1, dropped: bool = False,
         generated: str = "") -> Column:
    info = BUILTIN[type_oid]
    return Column(attnum=attnum, name=name, quoted=name, type_oid=type_oid, typmod=typmod,
                  attlen=info.typlen, attalign=info.typalign, attbyval=info.typbyval,
                  dropped=dropped, generated=generated)


COLUMNS = (
    _col(1, "id", 23),
    _col(2, 'we"ird name', 25),
    _col(3, "........pg.dropped.3........", 23, dropped=True),
    _col(4, "n", 1700, typmod=NUMERIC_10_2),
    _col(5, "nu", 1700),
    _col(6, "ts", 1184),
    _col(7, "d", 1082),
    _col(8, "ia", 1007),
    _col(9, "u", 2950),
    _col(10, "f", 700),  # real: the mirror column was promoted to double
    _col(11, "small", 21),  # smallint: the mirror column was promoted to long
    _col(12, "gv", 23, generated="v"),  # virtual generated: NULL, as the WAL logs it
)
REL = RelationVersion(oid=16500, db_oid=5, tablespace=1663, relfilenode=16500,
                      schema="My Schema", name="t", qualified='"My Schema".t', relkind="r",
                      persistence="p", replident="d", columns=COLUMNS, key_attnums=(1,),
                      valid_from=0x5000)
TABLE = "My Schema.t"


def _schema() -> Schema:
    data = [("id", IntegerType(), 1), ('we"ird name', StringType(), 2),
            ("n", DecimalType(10, 2), 4), ("nu", StringType(), 5),
            ("ts", TimestamptzType(), 6), ("d", DateType(), 7),
            ("ia", ListType(element_id=100, element_type=IntegerType(),
                            element_required=False), 8),
            ("u", UUIDType(), 9), ("f", DoubleType(), 10), ("small", LongType(), 11),
            ("gv", IntegerType(), 12),
            ("gone", StringType(), 40)]  # a column the relation version does not have
    fields = [NestedField(i + 1, name, t, required=False, doc=attnum_doc(attnum))
              for i, (name, t, attnum) in enumerate(data)]
    n = len(fields)
    for i, (name, t, doc) in enumerate(mirror_system_fields()):
        if name == CDC_PG_TEXT:
            t = type(t)(key_id=200, key_type=t.key_type, value_id=201,
                        value_type=t.value_type, value_required=False)
        fields.append(NestedField(n + i + 1, name, t, required=False, doc=doc))
    return Schema(*fields)


def _copy() -> CopyRows:
    return CopyRows(REL, BUILTIN, _schema(), commit_lsn=COMMIT_LSN, commit_ts_us=COMMIT_TS,
                    table=TABLE)


def _us(ts: dt.datetime) -> int:
    return (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


U1 = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"

#: COPY text of the selected columns: id, name, n, nu, ts, d, ia, u, f, small
ROWS: list[tuple[str | None, ...]] = [
    ("1", "tab\there, newline\n", "12.50", "0.000001", "2024-06-01 10:00:00.5+00",
     "2000-01-01", "{1,NULL,3}", U1, "1.1", "-32768"),
    ("2", None, "NaN", "NaN", "infinity", "-infinity", "{{1,2},{3,4}}", None, "NaN", None),
    ("3", "", "-0.01", None, "4714-11-24 00:00:00+00 BC", "4714-11-24 BC", "[0:1]={5,6}",
     None, "-0", "7"),
    ("4", "NULL", None, "Infinity", "-infinity", "infinity", "{}", None, "3.4028235e+38", None),
    ("5", None, None, None, None, None, None, None, None, None),
]

#: the values the merge holds for those rows (attnum -> value or PgText)
EXPECTED: list[dict[int, Any]] = [
    {1: 1, 2: "tab\there, newline\n", 4: Decimal("12.50"), 5: "0.000001",
     6: _us(dt.datetime(2024, 6, 1, 10, 0, 0, 500_000, tzinfo=dt.UTC)), 7: 10957,
     8: [1, None, 3], 9: uuid.UUID(U1).bytes, 10: 1.100000023841858, 11: -32768},
    {1: 2, 2: None, 4: PgText("NaN"), 5: "NaN", 6: INT64_MAX, 7: -INT32_MAX,
     8: PgText("{{1,2},{3,4}}"), 9: None, 10: float("nan"), 11: None},
    # Julian day 0 is 4714-11-24 BC; 1970-01-01 is Julian day 2440588
    {1: 3, 2: "", 4: Decimal("-0.01"), 5: None, 6: -2440588 * 86_400_000_000,
     7: -2440588, 8: PgText("[0:1]={5,6}"), 9: None, 10: -0.0, 11: 7},
    {1: 4, 2: "NULL", 4: None, 5: "Infinity", 6: -INT64_MAX, 7: INT32_MAX, 8: [],
     9: None, 10: 3.4028234663852886e38, 11: None},
    {1: 5, 2: None, 4: None, 5: None, 6: None, 7: None, 8: None, 9: None, 10: None, 11: None},
]


def test_select_list_quotes_every_live_column_in_attnum_order() -> None:
    copy = _copy()
    assert copy.select_list() == ('"id", "we""ird name", "n", "nu", "ts", "d", "ia", "u", '
                                  '"f", "small"')
    assert copy.qualified() == '"My Schema"."t"'
    assert copy.copy_statement(3, 10) == (
        f"COPY (SELECT {copy.select_list()} FROM ONLY \"My Schema\".\"t\" "
        "WHERE ctid >= '(3,0)'::tid AND ctid < '(10,0)'::tid) TO STDOUT")
    assert copy.copy_statement(10, None).endswith(
        "WHERE ctid >= '(10,0)'::tid) TO STDOUT")
    with pytest.raises(LakeError, match="bad block range"):
        copy.copy_statement(5, 4)
    assert quote_ident('a"b') == '"a""b"'


def test_session_settings_are_the_codecs_output_settings() -> None:
    joined = " ".join(SESSION_SETTINGS)
    for needed in ("TimeZone = 'UTC'", "DateStyle = 'ISO", "IntervalStyle = 'postgres'",
                   "extra_float_digits = 1", "bytea_output = 'hex'", "lc_monetary = 'C'",
                   "client_encoding = 'UTF8'"):
        assert needed in joined
    assert all(s.startswith("SET ") for s in SESSION_SETTINGS)


def _plain(data: pa.Table) -> list[dict[str, Any]]:
    """Rows with temporal values as storage integers and uuid as bytes."""
    from cdclake.lake.values import plain_values

    cols = {name: plain_values(data.column(name)) for name in data.column_names}
    return [{name: cols[name][i] for name in cols} for i in range(data.num_rows)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


def test_values_are_what_the_merge_stores() -> None:
    copy = _copy()
    data = copy.to_arrow(ROWS)
    assert data.schema == copy.file_schema
    rows = _plain(data)
    names = {1: "id", 2: 'we"ird name', 4: "n", 5: "nu", 6: "ts", 7: "d", 8: "ia", 9: "u",
             10: "f", 11: "small"}
    for got, want in zip(rows, EXPECTED, strict=True):
        texts = dict(got[CDC_PG_TEXT] or [])
        for attnum, value in want.items():
            if isinstance(value, PgText):
                assert got[names[attnum]] is None
                assert texts.pop(str(attnum)) == value.text
            else:
                assert _same(got[names[attnum]], value), (attnum, got[names[attnum]], value)
        assert texts == {}
        assert got["gv"] is None and got["gone"] is None
        assert got[CDC_COMMIT_LSN] == COMMIT_LSN
        assert got[CDC_COMMIT_TS] == COMMIT_TS
    # a row without untypeable values has a null map, not an empty one
    assert rows[0][CDC_PG_TEXT] is None and rows[4][CDC_PG_TEXT] is None
    assert dict(rows[1][CDC_PG_TEXT]) == {"4": "NaN", "8": "{{1,2},{3,4}}"}


def test_same_table_as_the_merge_builds() -> None:
    """lake.rows.table_of (what the merge writes) from the expected values, in the file's
    layout, equals the converter's output cell for cell."""
    schema = _schema()
    copy = _copy()
    commit_ts = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=COMMIT_TS)
    n = len(EXPECTED)
    merged = table_of(schema, TABLE, {CDC_COMMIT_LSN: [COMMIT_LSN] * n,
                                      CDC_COMMIT_TS: [commit_ts] * n}, EXPECTED, {})
    ours = copy.to_arrow(ROWS)
    assert merged.column_names == ours.column_names
    merged = pa.Table.from_arrays([merged.column(f.name).cast(f.type) for f in ours.schema],
                                  schema=ours.schema)
    for a, b in zip(_plain(merged), _plain(ours), strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert _same(a[name], b[name]), (name, a[name], b[name])


def test_field_ids_are_the_mirror_schemas() -> None:
    copy = _copy()
    schema = _schema()
    file_schema = copy.to_arrow(ROWS[:1]).schema
    for f in schema.fields:
        meta = file_schema.field(f.name).metadata
        assert meta[b"PARQUET:field_id"] == str(f.field_id).encode()
    pg_text = file_schema.field(CDC_PG_TEXT).type
    assert pg_text.key_field.metadata[b"PARQUET:field_id"] == b"200"
    ia = file_schema.field("ia").type
    assert ia.value_field.metadata[b"PARQUET:field_id"] == b"100"


def test_empty_rows_give_an_empty_table_of_the_schema() -> None:
    copy = _copy()
    data = copy.to_arrow([])
    assert data.num_rows == 0
    assert data.schema == copy.file_schema


def test_counts_only_for_values_pyiceberg_cannot_bound() -> None:
    copy = _copy()
    assert counts_only_columns(copy.to_arrow(ROWS[:1])) == []
    assert counts_only_columns(copy.to_arrow(ROWS)) == ["ts", "d"]


def test_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(LakeError, match="has 3 values where 10 columns"):
        _copy().to_arrow([("1", "x", "1.00")])


def test_mirror_without_a_live_column_is_refused() -> None:
    schema = _schema()
    fields = [f for f in schema.fields if f.name != "nu"]
    with pytest.raises(LakeError, match=r"no column for nu \(attnum 5\)"):
        CopyRows(REL, BUILTIN, Schema(*fields), commit_lsn=1, commit_ts_us=0, table=TABLE)


def test_mirror_column_that_cannot_hold_the_values_is_refused() -> None:
    fields = [NestedField(f.field_id, f.name, IntegerType(), required=False, doc=f.doc)
              if f.name == "f" else f for f in _schema().fields]
    with pytest.raises(LakeError, match=r"column f \(int\) cannot hold"):
        CopyRows(REL, BUILTIN, Schema(*fields), commit_lsn=1, commit_ts_us=0, table=TABLE)


def test_value_beyond_the_stream_type_is_an_error() -> None:
    """Text the stream's own type cannot hold (impossible for real COPY output of the
    column) is an error naming the column, never a silently different value."""
    copy = _copy()
    with pytest.raises(LakeError, match="values of column n do not fit"):
        copy.to_arrow([("1", None, "123456789012.00", None, None, None, None, None, None,
                        None)])


def test_enum_values_are_their_labels() -> None:
    cols = (_col(1, "id", 23), _col(2, "m", 90001))
    rel = dataclasses.replace(REL, columns=cols)
    schema = Schema(
        NestedField(1, "id", IntegerType(), required=False, doc=attnum_doc(1)),
        NestedField(2, "m", StringType(), required=False, doc=attnum_doc(2)))
    copy = CopyRows(rel, BUILTIN, schema, commit_lsn=1, commit_ts_us=0, table=TABLE)
    data = copy.to_arrow([("1", "happy"), ("2", None)])
    assert data.column("m").to_pylist() == ["happy", None]
