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
import io
import math
import random
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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

from cdclake.catalog.model import Column, RelationVersion, TypeInfo
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import LakeError
from cdclake.lake.rows import table_of
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    attnum_doc,
    iceberg_schema,
    mirror_system_fields,
)
from cdclake.lake.values import PgText
from cdclake.snapshot.copyrows import (
    SESSION_SETTINGS,
    CopyRows,
    binary_kind,
    counts_only_columns,
    quote_ident,
    vectorized,
)
from cdclake.tuples.codecs import codec_for, numeric_typmod
from cdclake.tuples.untypeable import NotTypeable
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


# -- the vectorized path (COPY CSV string columns) equals the codec path value for value -------
#
# Values are drawn as payloads (random bits, edges) and printed by the codecs' ``text`` — the
# output functions the oracle tests hold against PostgreSQL — so each column holds what COPY
# prints: plain values, which the kernels must convert exactly as the codec does, and the
# forms the guards leave to the codec (BC, infinity, NaN, years past 9999, 24:00:00, bounds).

ARRAY_TYPES = {
    1005: TypeInfo(oid=1005, name="smallint[]", output="array_out", typlen=-1, typbyval=False,
                   typalign="i", typtype="b", typcategory="A", element=21),
    1016: TypeInfo(oid=1016, name="bigint[]", output="array_out", typlen=-1, typbyval=False,
                   typalign="d", typtype="b", typcategory="A", element=20),
    1028: TypeInfo(oid=1028, name="oid[]", output="array_out", typlen=-1, typbyval=False,
                   typalign="i", typtype="b", typcategory="A", element=26),
}
TYPES = {**BUILTIN, **ARRAY_TYPES}
NUMERIC_38_10 = ((38 << 16) | 10) + 4
NUMERIC_5_5 = ((5 << 16) | 5) + 4
SEED = 20240601
#: a domain reads as its base type
DOMAIN_BASE = {90010: 23}


def _pack(fmt: str, v: int) -> bytes:
    return struct.pack(fmt, v)


def _float_payloads(rnd: random.Random, fmt: str, bits: int, n: int) -> list[bytes]:
    """Random bit patterns (NaN and ±inf among them, and subnormals), ±0, extremes."""
    out = [_pack(fmt, rnd.getrandbits(bits)) for _ in range(n)]
    specials = ([0.0, -0.0, 1.0, -1.5, 0.1, 1e-45, 3.4028235e38, float("inf"), float("nan")]
                if bits == 32 else
                [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1,
                 1e22, 1e23, 123456789.125, float("-inf"), float("nan")])
    code = "<f" if bits == 32 else "<d"
    out += [struct.pack(code, v) for v in specials]
    # small integers and short decimals: the common case in tables
    out += [struct.pack(code, rnd.randint(-10**6, 10**6) / rnd.choice([1, 10, 100, 1000]))
            for _ in range(n // 4)]
    return out


def _ints(rnd: random.Random, lo: int, hi: int, n: int) -> list[int]:
    return [rnd.randint(lo, hi) for _ in range(n)] + [lo, hi, 0, -1 if lo < 0 else 1]


def _texts(oid: int, typmod: int, rnd: random.Random, n: int) -> list[str | None]:
    """``n``-odd COPY texts of a column of type ``oid``, NULLs among them."""
    codec = codec_for(oid, typmod, TYPES)
    if oid == 1700:
        _, scale = numeric_typmod(typmod)
        digits = 38 if typmod == NUMERIC_38_10 else (10 if typmod == NUMERIC_10_2 else 5)
        values = [Decimal(rnd.randint(-10**digits + 1, 10**digits - 1)).scaleb(-scale)
                  for _ in range(n)]
        texts: list[str | None] = [f"{v:.{scale}f}" for v in values]
        texts += ["NaN", "Infinity", "-Infinity", f"{Decimal(0):.{scale}f}"]
    elif oid in (1007, 1005, 1016, 1028):
        elem = {1007: (-(2**31), 2**31 - 1), 1005: (-(2**15), 2**15 - 1),
                1016: (-(2**63), 2**63 - 1), 1028: (0, 2**32 - 1)}[oid]
        texts = []
        for _ in range(n):
            items = [None if rnd.random() < 0.1 else str(rnd.randint(*elem))
                     for _ in range(rnd.randint(0, 6))]
            texts.append("{" + ",".join("NULL" if x is None else x for x in items) + "}")
        texts += ["{}", "{NULL}", "{{1,2},{3,4}}", "[0:1]={5,6}", "[1:2]={5,6}", "{{}}"]
    elif oid in (25, 3802):
        alphabet = 'ab ,"\n\r\\\t{}é€😀\x01'
        texts = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
                 for _ in range(n)]
        texts += ["", '""', "NULL", "\\N", "\\.", ","]
    else:
        payloads: list[bytes] = {
            16: lambda: [bytes([rnd.getrandbits(1)]) for _ in range(n)],
            21: lambda: [_pack("<h", v) for v in _ints(rnd, -(2**15), 2**15 - 1, n)],
            23: lambda: [_pack("<i", v) for v in _ints(rnd, -(2**31), 2**31 - 1, n)],
            20: lambda: [_pack("<q", v) for v in _ints(rnd, -(2**63), 2**63 - 1, n)],
            26: lambda: [_pack("<I", v) for v in _ints(rnd, 0, 2**32 - 1, n)],
            700: lambda: _float_payloads(rnd, "<I", 32, n),
            701: lambda: _float_payloads(rnd, "<Q", 64, n),
            # days since 2000-01-01: 4714-11-24 BC .. 5874897 AD, and ±infinity
            1082: lambda: [_pack("<i", v) for v in
                           _ints(rnd, -2451545, 2145031948, n // 2)
                           + _ints(rnd, -730119, 2921939, n // 2)  # years 1 .. 9999
                           + [2**31 - 1, -(2**31)]],
            1083: lambda: [_pack("<q", v) for v in _ints(rnd, 0, 86_400_000_000, n)],
            1114: lambda: [_pack("<q", v) for v in _timestamps(rnd, n)],
            1184: lambda: [_pack("<q", v) for v in _timestamps(rnd, n)],
            2950: lambda: [rnd.randbytes(16) for _ in range(n)],
            17: lambda: [rnd.randbytes(rnd.randint(0, 40)) for _ in range(n)],
        }[DOMAIN_BASE.get(oid, oid)]()
        texts = [codec.text(p) for p in payloads]
    texts += [None] * max(1, len(texts) // 10)
    rnd.shuffle(texts)
    return texts


def _timestamps(rnd: random.Random, n: int) -> list[int]:
    """µs since 2000-01-01: the whole range (BC, past 9999, ±infinity) and years 1..9999."""
    lo, hi = -211813488000000000, 9223371331200000000 - 1
    plain_lo, plain_hi = -63082281600000000, 252455615999999999
    out = _ints(rnd, lo, hi, n // 3) + _ints(rnd, plain_lo, plain_hi, n)
    out += [rnd.randint(plain_lo // 86_400_000_000, plain_hi // 86_400_000_000)
            * 86_400_000_000 + rnd.randint(0, 86_399) * 1_000_000 for _ in range(n // 3)]
    return [*out, 2**63 - 1, -(2**63)]


#: (type oid, typmod) of every codec with a vectorized form
FAST = [(16, -1), (21, -1), (23, -1), (20, -1), (26, -1), (700, -1), (701, -1), (1082, -1),
        (1083, -1), (1114, -1), (1184, -1), (1700, NUMERIC_10_2), (1700, NUMERIC_38_10),
        (1700, NUMERIC_5_5), (2950, -1), (17, -1), (1007, -1), (1005, -1), (1016, -1),
        (1028, -1), (25, -1), (3802, -1), (1700, -1), (90010, -1)]


def _bits(arr: pa.Array) -> pa.Array:
    """Floats as their bits (-0.0 apart from 0.0, NaN equal to NaN); anything else as is."""
    if pa.types.is_floating(arr.type):
        return arr.view(pa.int32() if arr.type == pa.float32() else pa.int64())
    return arr


def _assert_same_table(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    for name in got.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        assert _bits(a).equals(_bits(b)), (name, a, b)


def _per_value(codec: Any, texts: list[str | None]) -> tuple[pa.Array, dict[int, str]]:
    values: list[Any] = []
    untypeable: dict[int, str] = {}
    for i, s in enumerate(texts):
        try:
            values.append(None if s is None else codec.value_from_text(s))
        except NotTypeable:
            values.append(None)
            untypeable[i] = s  # type: ignore[assignment]
    return pa.array(values, type=codec.arrow_type), untypeable


@pytest.mark.parametrize(("oid", "typmod"), FAST)
def test_vectorized_equals_the_codec_on_plain_values(oid: int, typmod: int) -> None:
    """Every text the guard admits converts to exactly the codec's value; the guard admits
    all plain forms (checked: it is not silently falling back)."""
    rnd = random.Random(SEED + oid + typmod)
    codec = codec_for(oid, typmod, TYPES)
    fast = vectorized(codec)
    assert fast is not None, codec
    texts = _texts(oid, typmod, rnd, 3000)
    plain = [s for s in texts
             if s is None or fast(pa.array([s], pa.string())) is not None]
    missed = [s for s in texts if s not in plain]
    assert len(plain) > len(texts) // 2, missed[:10]
    for sl in (slice(None), slice(7, 1500)):  # sliced arrays (offsets) as CSV batches give
        strings = pa.array(plain, pa.string())[sl]
        got = fast(strings)
        want, untypeable = _per_value(codec, strings.to_pylist())
        assert got is not None and not untypeable
        got.validate(full=True)
        assert got.type == want.type
        assert _bits(got).equals(_bits(want)), [
            (s, g, w) for s, g, w in zip(strings.to_pylist(), got.to_pylist(),
                                         want.to_pylist(), strict=True) if g != w][:5]
    # what the guard refuses is what the codec alone may read: non-plain forms only
    for s in missed:
        assert s is not None
        assert fast(pa.array([s, None], pa.string())) is None


def test_guard_miss_sends_the_whole_column_value_by_value() -> None:
    """One non-plain value in a column of a batch: the column goes through the codec (its
    untypeable values as NULL + text); the other columns stay on their kernels."""
    copy = _copy()
    columns = [pa.array(col, pa.string()) for col in zip(*ROWS, strict=True)]
    got = copy.from_strings(columns)
    want = copy.to_arrow(ROWS)
    _assert_same_table(got, want)
    assert dict(got.column(CDC_PG_TEXT).to_pylist()[1]) == {"4": "NaN", "8": "{{1,2},{3,4}}"}
    plain = [row for row in ROWS if row[0] in ("1", "5")]
    got = copy.from_strings([pa.array(col, pa.string()) for col in zip(*plain, strict=True)])
    _assert_same_table(got, copy.to_arrow(plain))
    assert got.column(CDC_PG_TEXT).null_count == 2


def _fast_relation() -> tuple[RelationVersion, Schema]:
    cols = [_col(1, "id", 23)]
    for i, (oid, typmod) in enumerate(FAST):
        info = TYPES[oid]
        cols.append(Column(attnum=i + 2, name=f"c{i}", quoted=f"c{i}", type_oid=oid,
                           typmod=typmod, attlen=info.typlen, attalign=info.typalign,
                           attbyval=info.typbyval, dropped=False, generated=""))
    rel = dataclasses.replace(REL, columns=tuple(cols), key_attnums=(1,))
    live = LayoutCache(TYPES).get(rel).live
    schema = iceberg_schema(rel, pa.schema([pa.field(lc.column.name, lc.codec.arrow_type)
                                            for lc in live]))
    return rel, schema


def test_from_strings_equals_to_arrow_on_random_columns() -> None:
    """A table of every fast type, random and edge values mixed in batches: the CSV path's
    file table equals the text path's, cell for cell (untypeable texts included)."""
    rel, schema = _fast_relation()
    copy = CopyRows(rel, TYPES, schema, commit_lsn=COMMIT_LSN, commit_ts_us=COMMIT_TS,
                    table=TABLE)
    rnd = random.Random(SEED)
    n = 400
    columns: list[list[str | None]] = [[str(i) for i in range(n)]]
    for oid, typmod in FAST:
        col = _texts(oid, typmod, rnd, n)[:n]
        columns.append(col + [None] * (n - len(col)))
    rows = list(zip(*columns, strict=True))
    for start, size in ((0, n), (0, 50), (50, 7), (390, 10)):  # small batches: guards both ways
        part = rows[start:start + size]
        strings = [pa.array(col, pa.string())[start:start + size] for col in columns]
        _assert_same_table(copy.from_strings(strings), copy.to_arrow(part))
    assert copy.to_arrow(rows).column(CDC_PG_TEXT).null_count < n  # untypeable ones were there


def test_no_fast_form_without_an_exact_kernel() -> None:
    for oid in (1009, 1231, 1115, 1182, 1000, 1001, 2951, 1021):
        assert vectorized(codec_for(oid, -1, TYPES)) is None, oid
    for oid in (1186, 3904, 90001):  # interval, int4range, an enum: their text is the value
        assert vectorized(codec_for(oid, -1, TYPES)) is not None, oid
    # identity codecs of another Arrow type, or a renamed parser, have none either
    codec = codec_for(25, -1, TYPES)
    codec.arrow_type = pa.large_string()
    assert vectorized(codec) is None
    codec = codec_for(23, -1, TYPES)
    codec.value_from_text = lambda s: int(s)
    assert vectorized(codec) is None


def test_csv_reader_reads_what_postgresql_prints() -> None:
    """NULL is an unquoted empty field, "" the empty string; quoted values span lines; a row
    of one NULL is an empty line and still a row."""
    copy = _copy()
    width = len(copy.selected)
    lines = [",".join(['1', '"a,""b""\nc"', '""'] + [""] * (width - 3)),
             ",".join(['2', '', '"\r\n"'] + [""] * (width - 3))]
    data = ("\n".join(lines) + "\n").encode()
    batches = list(copy.csv_reader(io.BytesIO(data), 1 << 20))
    cols = pa.Table.from_batches(batches).columns
    assert cols[0].to_pylist() == ["1", "2"]
    assert cols[1].to_pylist() == ['a,"b"\nc', None]
    assert cols[2].to_pylist() == ["", "\r\n"]
    assert all(c.type == pa.string() for c in cols)
    one = CopyRows(dataclasses.replace(REL, columns=(_col(1, "id", 23),)), BUILTIN,
                   Schema(NestedField(1, "id", IntegerType(), required=False,
                                      doc=attnum_doc(1))),
                   commit_lsn=1, commit_ts_us=0, table=TABLE)
    [col] = pa.Table.from_batches(list(one.csv_reader(io.BytesIO(b"1\n\n3\n"), 1 << 20))).columns
    assert col.to_pylist() == ["1", None, "3"]
    assert copy.copy_statement(0, 1, csv=True).endswith(") TO STDOUT WITH (FORMAT csv)")
    with pytest.raises(pa.ArrowInvalid, match="straddling"):
        list(copy.csv_reader(io.BytesIO(b'1,"' + b"x" * 5000 + b'"\n' * 3), 1000))


def test_relation_without_a_selectable_column_counts_its_rows() -> None:
    """Only a virtual generated column: COPY selects NULL, one empty CSV line per row."""
    rel = dataclasses.replace(REL, columns=(_col(1, "gv", 23, generated="v"),))
    schema = Schema(NestedField(1, "gv", IntegerType(), required=False, doc=attnum_doc(1)),
                    *[NestedField(2 + i, name, t, required=False, doc=doc)
                      for i, (name, t, doc) in enumerate(mirror_system_fields())
                      if name != CDC_PG_TEXT])
    copy = CopyRows(rel, BUILTIN, schema, commit_lsn=1, commit_ts_us=0, table=TABLE)
    assert copy.select_list() == "NULL"
    batches = list(copy.csv_reader(io.BytesIO(b"\n\n\n"), 1 << 20))
    got = copy.from_strings(pa.Table.from_batches(batches).columns)
    _assert_same_table(got, copy.to_arrow([(None,)] * 3))
    assert got.num_rows == 3 and got.column("gv").null_count == 3
    with pytest.raises(LakeError, match="COPY gave 2 columns where 1"):
        copy.from_strings([pa.array([None], pa.string())] * 2)


def _printed(oid: int, payload: st.SearchStrategy[bytes]) -> st.SearchStrategy[str]:
    codec = codec_for(oid, -1, TYPES)
    return payload.map(codec.text)


def _int_array(lo: int, hi: int) -> st.SearchStrategy[str]:
    items = st.lists(st.one_of(st.none(), st.integers(lo, hi)), max_size=5)
    return items.map(lambda xs: "{" + ",".join("NULL" if x is None else str(x)
                                                for x in xs) + "}")


_US_PLAIN = st.integers(-63082281600000000, 252455615999999999)  # years 1..9999
_US_ALL = st.integers(-211813488000000000, 9223371331200000000 - 1)
#: (type oid, typmod) -> what COPY prints for values of the type, plain or not
PRINTED: dict[tuple[int, int], st.SearchStrategy[str]] = {
    (16, -1): st.sampled_from(["t", "f"]),
    (21, -1): st.integers(-(2**15), 2**15 - 1).map(str),
    (20, -1): st.integers(-(2**63), 2**63 - 1).map(str),
    (26, -1): st.integers(0, 2**32 - 1).map(str),
    (700, -1): _printed(700, st.one_of(st.integers(0, 2**32 - 1).map(lambda v: _pack("<I", v)),
                                       st.floats(width=32).map(lambda v: struct.pack("<f", v)))),
    (701, -1): _printed(701, st.one_of(st.integers(0, 2**64 - 1).map(lambda v: _pack("<Q", v)),
                                       st.floats().map(lambda v: struct.pack("<d", v)))),
    (1082, -1): _printed(1082, st.one_of(st.integers(-730119, 2921939),  # years 1..9999
                                         st.integers(-2451545, 2145031948),
                                         st.sampled_from([2**31 - 1, -(2**31)]))
                         .map(lambda v: _pack("<i", v))),
    (1083, -1): _printed(1083, st.integers(0, 86_400_000_000).map(lambda v: _pack("<q", v))),
    (1114, -1): _printed(1114, st.one_of(_US_PLAIN, _US_ALL).map(lambda v: _pack("<q", v))),
    (1184, -1): _printed(1184, st.one_of(_US_PLAIN, _US_ALL).map(lambda v: _pack("<q", v))),
    (1700, NUMERIC_10_2): st.one_of(
        st.decimals(places=2, allow_nan=False, allow_infinity=False,
                    min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"))
        .map(lambda d: f"{d:.2f}"),
        st.sampled_from(["NaN", "Infinity", "-Infinity"])),
    (2950, -1): _printed(2950, st.binary(min_size=16, max_size=16)),
    (17, -1): _printed(17, st.binary(max_size=40)),
    (1007, -1): st.one_of(_int_array(-(2**31), 2**31 - 1),
                          st.sampled_from(["{{1,2},{3,4}}", "[0:1]={5,6}", "[2:2]={7}"])),
    (1016, -1): _int_array(-(2**63), 2**63 - 1),
    (25, -1): st.text(),
}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_vectorized_equals_the_codec_on_drawn_columns(data: st.DataObject) -> None:
    """Drawn columns of COPY texts, NULLs among them: when the kernel takes the column, its
    array is the codec's, value for value; when the guard refuses it, some value was not
    plain (from_strings then goes value by value, checked by the tests above)."""
    for (oid, typmod), printed in PRINTED.items():
        codec = codec_for(oid, typmod, TYPES)
        fast = vectorized(codec)
        assert fast is not None
        texts = data.draw(st.lists(st.one_of(st.none(), printed), max_size=25),
                          label=f"{oid}/{typmod}")
        want, untypeable = _per_value(codec, texts)
        got = fast(pa.array(texts, pa.string()))
        if got is None:
            continue
        got.validate(full=True)
        assert not untypeable, untypeable
        assert _bits(got).equals(_bits(want)), (oid, texts, got, want)


def test_binary_plan_reads_each_column_as_the_stream_holds_it() -> None:
    """A kind where the binary form is the datum the stream decodes (by the codec's parser
    and the base type), else the output function's text: unconstrained numeric (kept as
    text), int[] (an array, the CSV path's kernel reads its text); none for the dropped and
    the virtual generated column, which COPY does not select."""
    copy = _copy()
    assert copy.binary_plan == ["int32", "text", "numeric", "output", "timestamp", "date",
                                "output", "uuid", "float32", "int16"]
    assert copy.output_types() == [1007, 1700]
    outputs = {1700: ("pg_catalog.numeric_out", "numeric"),
               1007: ("pg_catalog.array_out", "integer[]")}
    statement = copy.binary_statement(outputs, 3, 9)
    assert statement == (
        'COPY (SELECT "id", "we""ird name", "n", pg_catalog.textin(pg_catalog.numeric_out('
        '"nu")), "ts", "d", pg_catalog.textin(pg_catalog.array_out("ia")), "u", "f", "small" '
        'FROM ONLY "My Schema"."t" WHERE ctid >= \'(3,0)\'::tid AND ctid < \'(9,0)\'::tid) '
        "TO STDOUT WITH (FORMAT binary)")
    with pytest.raises(LakeError, match=r"no output function .* ia"):
        copy.binary_statement({1700: outputs[1700]})


def test_binary_kind_needs_the_base_type_whose_binary_form_it_reads() -> None:
    assert binary_kind(codec_for(23, -1, BUILTIN), 23) == "int32"
    assert binary_kind(codec_for(20, -1, BUILTIN), 20) == "int64"
    assert binary_kind(codec_for(16, -1, BUILTIN), 16) == "bool"
    assert binary_kind(codec_for(1042, -1, BUILTIN), 1042) == "text"  # padded, as printed
    assert binary_kind(codec_for(3802, -1, BUILTIN), 3802) == "jsonb"
    assert binary_kind(codec_for(1114, -1, BUILTIN), 1114) == "timestamp"
    # a text codec over a type whose binary form is not its text: the output function
    assert binary_kind(codec_for(1186, -1, BUILTIN), 1186) == "output"  # interval
    assert binary_kind(codec_for(869, -1, BUILTIN), 869) == "output"  # inet
    # the right parser over another base type's binary form: the output function
    assert binary_kind(codec_for(23, -1, BUILTIN), 26) == "output"
