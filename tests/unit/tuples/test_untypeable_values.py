"""The type mapping's edge values: each is typed exactly or raises NotTypeable (never an error,
never a silent None), and its text is what PostgreSQL prints.

Typed: ±infinity dates (date32 ±(2**31 - 1)) and timestamps (±(2**63 - 1)), BC dates and
timestamps, years past 9999 up to the last µs an int64 counted from 1970 holds. Not typeable:
NaN in numeric(p,s), time 24:00:00, timestamps from 294247-01-10 04:00:54.775807 on,
multi-dimensional arrays, arrays whose lower bound is not 1, arrays with an untypeable element.
Strings already: unconstrained and huge numerics, timetz with seconds in the offset, money.
"""

from __future__ import annotations

import struct
from decimal import Decimal

import pyarrow as pa
import pytest

from cdclake.catalog.model import TypeInfo
from cdclake.tuples import datetimes
from cdclake.tuples.codecs import Codec, codec_for
from cdclake.tuples.untypeable import NotTypeable
from tests.unit.tuples.builtin_types import BUILTIN
from tests.unit.tuples.test_codecs import _array, numeric_disk, typmod

TYPES: dict[int, TypeInfo] = {
    **BUILTIN,
    1266: TypeInfo(oid=1266, name="time with time zone", output="timetz_out", typlen=12,
                   typbyval=False, typalign="d", typtype="b", typcategory="D"),
    790: TypeInfo(oid=790, name="money", output="cash_out", typlen=8, typbyval=True,
                  typalign="d", typtype="b", typcategory="N"),
    1183: TypeInfo(oid=1183, name="time without time zone[]", output="array_out", typlen=-1,
                   typbyval=False, typalign="d", typtype="b", typcategory="A", element=1083),
}

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
PG_EPOCH_DAYS = 10_957  # 1970-01-01 -> 2000-01-01
PG_EPOCH_US = PG_EPOCH_DAYS * 86_400_000_000


def codec(oid: int, mod: int = -1) -> Codec:
    return codec_for(oid, mod, TYPES, column="c", relation="public.t")


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def i64(v: int) -> bytes:
    return struct.pack("<q", v)


def typed(c: Codec, payload: bytes, text: str, value: object) -> None:
    """``payload`` prints as ``text``, maps to ``value`` both ways, and fits the Arrow type."""
    assert c.text(payload) == text
    assert c.value(payload) == value
    assert c.value_from_text(text) == value
    pa.array([value], type=c.arrow_type)


def untyped(c: Codec, payload: bytes, text: str) -> None:
    """``payload`` prints as ``text`` and has no typed value, from bytes or from text."""
    assert c.text(payload) == text
    with pytest.raises(NotTypeable):
        c.value(payload)
    with pytest.raises(NotTypeable):
        c.value_from_text(text)


# -- dates and timestamps: typed, through integers ------------------------------------------


@pytest.mark.parametrize(("pg_days", "text", "value"), [
    (INT32_MAX, "infinity", INT32_MAX),
    (-(2**31), "-infinity", -INT32_MAX),
    (-2451545 + 0, "4714-11-24 BC", -2451545 + PG_EPOCH_DAYS),  # Julian day 0
    (-730119 - 366, "0001-01-01 BC", -730119 - 366 + PG_EPOCH_DAYS),  # year 0 is a leap year
    (2932897 - PG_EPOCH_DAYS, "10000-01-01", 2932897),
    (2145031948, "5874897-12-31", 2145031948 + PG_EPOCH_DAYS),  # PostgreSQL's last date
])
def test_dates(pg_days: int, text: str, value: int) -> None:
    typed(codec(1082), i32(pg_days), text, value)


@pytest.mark.parametrize(("pg_us", "text", "value"), [
    (INT64_MAX, "infinity", INT64_MAX),
    (-(2**63), "-infinity", -INT64_MAX),
    (-211813488000000000, "4714-11-24 00:00:00 BC", -211813488000000000 + PG_EPOCH_US),
    (252455616000000000, "10000-01-01 00:00:00", 252455616000000000 + PG_EPOCH_US),
    # the last µs an int64 counted from 1970 holds (INT64_MAX itself means infinity)
    (INT64_MAX - 1 - PG_EPOCH_US, "294247-01-10 04:00:54.775806", INT64_MAX - 1),
])
def test_timestamps(pg_us: int, text: str, value: int) -> None:
    typed(codec(1114), i64(pg_us), text, value)
    typed(codec(1184), i64(pg_us), text if "inf" in text else (
        text.replace(" BC", "+00 BC") if text.endswith(" BC") else text + "+00"), value)


@pytest.mark.parametrize(("pg_us", "text"), [
    (INT64_MAX - PG_EPOCH_US, "294247-01-10 04:00:54.775807"),
    (9223371331199999999, "294276-12-31 23:59:59.999999"),  # PostgreSQL's last timestamp
])
def test_timestamps_past_int64_are_not_typeable(pg_us: int, text: str) -> None:
    untyped(codec(1114), i64(pg_us), text)
    untyped(codec(1184), i64(pg_us), text + "+00")


def test_offset_timestamptz_text_parses_to_the_instant() -> None:
    c = codec(1184)
    assert c.value_from_text("2000-01-01 05:30:15+05:30:15") == PG_EPOCH_US
    assert c.value_from_text("4714-11-24 00:00:00+00 BC") == -211813488000000000 + PG_EPOCH_US


# -- times ----------------------------------------------------------------------------------


def test_time_24_is_not_typeable() -> None:
    c = codec(1083)
    typed(c, i64(86_399_999_999), "23:59:59.999999", 86_399_999_999)
    untyped(c, i64(86_400_000_000), "24:00:00")


@pytest.mark.parametrize(("us", "zone", "text"), [
    (43_200_000_000, -19815, "12:00:00+05:30:15"),  # seconds in the offset
    (0, 57599, "00:00:00-15:59:59"),
    (86_400_000_000, 57540, "24:00:00-15:59"),
])
def test_timetz_is_exact_text(us: int, zone: int, text: str) -> None:
    c = codec(1266)
    assert c.arrow_type == pa.string()
    assert c.text(struct.pack("<qi", us, zone)) == text
    assert c.value(struct.pack("<qi", us, zone)) == text


# -- numerics and money ---------------------------------------------------------------------


@pytest.mark.parametrize("mod", [typmod(10, 2), typmod(38, 0)])
def test_nan_in_a_decimal_column_is_not_typeable(mod: int) -> None:
    untyped(codec(1700, mod), struct.pack("<H", 0xC000), "NaN")


def test_unconstrained_and_huge_numerics_are_exact_text() -> None:
    plain = codec(1700)
    assert plain.arrow_type == pa.string()
    for head, text in ((0xC000, "NaN"), (0xD000, "Infinity"), (0xF000, "-Infinity")):
        assert plain.value(struct.pack("<H", head)) == text
    huge = Decimal("9" * 1000)
    assert plain.value(numeric_disk(huge)) == "9" * 1000
    tiny = Decimal("0." + "0" * 999 + "1")
    assert plain.value(numeric_disk(tiny)) == format(tiny, "f")
    wide = codec(1700, typmod(40, 4))
    assert wide.arrow_type == pa.string()
    assert wide.value(numeric_disk(Decimal("-123456789012345678901234567890123456.1234"))) \
        == "-123456789012345678901234567890123456.1234"
    widest = codec(1700, typmod(38, 0))
    typed(widest, numeric_disk(Decimal("9" * 38)), "9" * 38, Decimal("9" * 38))


@pytest.mark.parametrize(("cents", "text"), [
    (0, "$0.00"), (123456, "$1,234.56"), (-(2**63), "-$92,233,720,368,547,758.08"),
    (2**63 - 1, "$92,233,720,368,547,758.07"),
])
def test_money_is_its_lc_monetary_c_text(cents: int, text: str) -> None:
    c = codec(790)
    assert c.arrow_type == pa.string()
    assert c.value(i64(cents)) == text


# -- arrays ---------------------------------------------------------------------------------


def ints(dims: list[int], lbs: list[int], values: list[int | None]) -> bytes:
    return _array(23, dims, lbs, [None if v is None else i32(v) for v in values], 4, 4)


def test_multidimensional_and_lower_bound_arrays_are_not_typeable() -> None:
    c = codec(1007)
    untyped(c, ints([2, 2], [1, 1], [1, 2, 3, 4]), "{{1,2},{3,4}}")
    untyped(c, ints([3], [0], [7, 8, 9]), "[0:2]={7,8,9}")
    untyped(c, ints([1], [-5], [None]), "[-5:-5]={NULL}")
    untyped(c, ints([2, 1], [1, 1], [7, 8]), "{{7},{8}}")
    untyped(c, ints([2, 1], [-3, 5], [7, 8]), "[-3:-2][5:5]={{7},{8}}")
    typed(c, ints([3], [1], [1, None, 3]), "{1,NULL,3}", [1, None, 3])
    typed(c, _array(23, [], [], [], 4, 4), "{}", [])


def test_arrays_of_edge_values() -> None:
    dates = codec(1182)
    typed(dates, _array(1082, [3], [1], [i32(INT32_MAX), i32(-(2**31)), i32(-2451545)], 4, 4),
          "{infinity,-infinity,\"4714-11-24 BC\"}",
          [INT32_MAX, -INT32_MAX, -2451545 + PG_EPOCH_DAYS])
    stamps = codec(1115)
    typed(stamps, _array(1114, [2], [1], [i64(INT64_MAX), i64(-(2**63))], 8, 8),
          "{infinity,-infinity}", [INT64_MAX, -INT64_MAX])
    untyped(stamps, _array(1114, [2], [1], [i64(0), i64(9223371331199999999)], 8, 8),
            '{"2000-01-01 00:00:00","294276-12-31 23:59:59.999999"}')
    times = codec(1183)
    untyped(times, _array(1083, [2], [1], [i64(0), i64(86_400_000_000)], 8, 8),
            "{00:00:00,24:00:00}")
    decimals = codec(1231, typmod(10, 2))
    assert decimals.arrow_type == pa.list_(pa.decimal128(10, 2))
    untyped(decimals, _array(1700, [2], [1], [struct.pack("<I", 12 << 2)
                                              + numeric_disk(Decimal("1.50")),
                                              struct.pack("<I", 6 << 2) + b"\x00\xc0"], -1, 4),
            "{1.50,NaN}")
    texts = codec(1009)
    untyped(texts, _array(25, [2, 2], [1, 1],
                          [struct.pack("<I", 5 << 2) + w for w in (b"a", b"b", b"c", b"d")],
                          -1, 4), "{{a,b},{c,d}}")


def test_value_from_text_refuses_malformed_bounds() -> None:
    from cdclake.errors import TupleDecodeError
    with pytest.raises(TupleDecodeError, match="malformed dimensions"):
        codec(1007).value_from_text("[x]={1}")


def test_typed_infinities_are_duckdb_encodings() -> None:
    # DuckDB's date_t/timestamp_t infinity and -infinity: no real PostgreSQL value reaches them
    assert datetimes.date_value(i32(-(2**31))) == -(2**31 - 1)
    assert datetimes.timestamp_value(i64(-(2**63))) == -(2**63 - 1)
    last_date = datetimes.date_value(i32(2145031948))
    assert -INT32_MAX < datetimes.date_value(i32(-2451545)) < last_date < INT32_MAX
