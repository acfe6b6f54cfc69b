"""Oracle with random values (hypothesis): each example inserts a batch of rows with random
values of the common types and compares text (and, for non-string mappings, value) output.

Values go in as exact parameters (integers, decimals, strings, microsecond offsets), so what
the server stores is exactly known to it; the codecs must print it as the server does.
"""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.oracle.tuples.harness import decode_table

pytestmark = pytest.mark.oracle

USEC_RANGE = (-211813488000000000 + 1, 9223371331200000000 - 1)  # timestamp's valid range
DAY_RANGE = (-2451545, 2145031948)  # date's valid range (4714-11-24 BC .. 5874897-12-31)

def _split(n: int, unit: int) -> tuple[int, int]:
    """n = q * unit + r with |r| < unit, so that float8 interval arithmetic stays exact."""
    q = abs(n) // unit * (1 if n >= 0 else -1)
    return q, n - q * unit


def _split_day(n: int) -> tuple[int, int]:
    return _split(n, 86_400_000_000)


#: PostgreSQL text cannot hold NUL (nor can jsonb strings)
_TEXT = st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=40)
text_values = _TEXT

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT.map(lambda s: s[:8]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(_TEXT.map(lambda s: s[:6]), children, max_size=4),
    max_leaves=12)

numeric_values = st.one_of(
    st.decimals(allow_nan=False, allow_infinity=False, places=None,
                min_value=Decimal("-1e40"), max_value=Decimal("1e40")),
    st.decimals(allow_nan=False, allow_infinity=False, places=6,
                min_value=Decimal("-1e12"), max_value=Decimal("1e12")),
    st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")]))
float4_values = st.integers(0, 2**32 - 1).map(
    lambda b: struct.unpack("<f", struct.pack("<I", b))[0])

COLUMNS: list[tuple[str, str, st.SearchStrategy[Any]]] = [
    # (type, SQL expression of the parameter, strategy)
    ("int2", "%s::int2", st.integers(-(2**15), 2**15 - 1)),
    ("int8", "%s::int8", st.integers(-(2**63), 2**63 - 1)),
    ("float8", "%s::float8", st.floats(allow_nan=True, allow_infinity=True)),
    ("float4", "%s::float8::float4", float4_values.filter(lambda f: not math.isnan(f))),
    ("numeric", "%s::numeric", numeric_values),
    ("text", "%s::text", text_values),
    ("bytea", "%s::bytea", st.binary(max_size=30)),
    ("timestamp", "'2000-01-01'::timestamp + make_interval(days => %s) + "
                  "%s * interval '1 microsecond'", st.integers(*USEC_RANGE).map(_split_day)),
    ("timestamptz", "'2000-01-01+00'::timestamptz + make_interval(days => %s) + "
                    "%s * interval '1 microsecond'", st.integers(*USEC_RANGE).map(_split_day)),
    ("date", "date '2000-01-01' + %s::int", st.integers(*DAY_RANGE)),
    ("interval", "make_interval(months => %s) + make_interval(days => %s) + "
                 "make_interval(hours => %s) + %s * interval '1 microsecond'",
     st.tuples(st.integers(-(2**31) + 2, 2**31 - 2), st.integers(-(2**31) + 2, 2**31 - 2),
               st.integers(-(2**62), 2**62)).map(
                   lambda t: (t[0], t[1], *_split(t[2], 3_600_000_000)))),
    ("jsonb", "%s::jsonb", json_values.map(json.dumps)),
    ("int4[]", "%s::int4[]", st.lists(st.none() | st.integers(-(2**31), 2**31 - 1),
                                      max_size=6)),
    ("text[]", "%s::text[]", st.lists(st.none() | text_values, max_size=4)),
    ("numeric[]", "%s::numeric[]", st.lists(st.none() | numeric_values, max_size=4)),
    ("float8[]", "%s::float8[]", st.lists(st.floats(), max_size=4)),
]

rows_strategy = st.lists(
    st.tuples(*[st.none() | s for _, _, s in COLUMNS]), min_size=20, max_size=20)


@settings(max_examples=6, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=rows_strategy)
def test_random_values(conn: Any, rows: list[tuple[Any, ...]]) -> None:
    conn.execute("DROP TABLE IF EXISTS rnd")
    conn.execute("CREATE TABLE rnd (" + ", ".join(
        f"c{i} {t}" for i, (t, _, _) in enumerate(COLUMNS)) + ")")
    for row in rows:
        exprs, params = [], []
        for (_, expr, _), v in zip(COLUMNS, row, strict=True):
            if v is None:
                exprs.append("NULL")
                continue
            exprs.append(f"({expr})")
            params.extend(v if isinstance(v, tuple) else (v,))
        conn.execute(f"INSERT INTO rnd VALUES ({', '.join(exprs)})", params)
    result = decode_table(conn, "rnd")
    assert result.mismatches == []
    assert result.compared == len(rows) * len(COLUMNS)
