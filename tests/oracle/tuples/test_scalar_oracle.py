"""Oracle at scale for the fixed-layout scalar codecs, thousands of random values per type.

The server's binary send format of these types is their on-disk layout in network byte order
(float8send, timestamp_send, interval_send, ...; numeric_send carries the same base-10000
digits), so ``<type>_send(x)`` gives the exact datum bytes without reading pages. Each value's
``format('%s', x)`` (the output function) must equal the codec's text of those bytes.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from typing import Any

import pytest

from cdclake.catalog.model import TypeInfo
from cdclake.tuples.codecs import codec_for
from tests.oracle.tuples.pagetuples import capture_types

pytestmark = pytest.mark.oracle

SEED = 20250101
N = 3000


def _swap(fmt: str) -> Callable[[bytes], bytes]:
    """Network-order fields -> little-endian on-disk bytes."""
    be, le = struct.Struct(">" + fmt), struct.Struct("<" + fmt)
    return lambda b: le.pack(*be.unpack(b))


def _numeric_disk(b: bytes) -> bytes:
    """numeric_send (ndigits, weight, sign, dscale, digits) -> on-disk long/special form."""
    ndigits, weight, sign, dscale = struct.unpack_from(">hhHH", b)
    digits = struct.unpack_from(f">{ndigits}h", b, 8)
    if sign >= 0xC000:
        return struct.pack("<H", sign)
    return struct.pack(f"<Hh{ndigits}h", sign | dscale, weight, *digits)


def _random_doubles(rng: random.Random) -> list[float]:
    out: list[float] = []
    while len(out) < N:
        kind = rng.randrange(4)
        if kind == 0:  # any bit pattern
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        elif kind == 1:  # short decimals, where repr and Ryu boundaries meet
            x = float(f"{rng.randrange(1, 10**rng.randrange(1, 17))}e{rng.randrange(-30, 30)}")
        elif kind == 2:  # integers around 2**53 and beyond
            x = float(rng.randrange(1, 2**rng.randrange(40, 80)))
        else:  # near the fixed/scientific thresholds
            x = rng.choice([1e-5, 1e-4, 1e14, 1e15, 1e16]) * rng.uniform(0.5, 20)
        if x == x:  # NaN payloads do not survive text round trips
            out.append(-x if rng.random() < 0.3 else x)
    return out


def _compare(conn: Any, types: dict[int, TypeInfo], type_oid: int, typmod: int,
             sql_values: str, params: Any, to_disk: Callable[[bytes], bytes],
             send: str) -> int:
    codec = codec_for(type_oid, typmod, types, column="x")
    rows = conn.execute(
        f"SELECT {send}(x), format('%%s', x) FROM ({sql_values}) AS v(x)", params).fetchall()
    bad = [(text, codec.text(to_disk(bytes(raw)))) for raw, text in rows
           if codec.text(to_disk(bytes(raw))) != text]
    assert bad[:10] == [], f"{len(bad)} of {len(rows)} differ (seed {SEED})"
    return len(rows)


def test_floats(conn: Any) -> None:
    rng = random.Random(SEED)
    types = capture_types(conn)
    doubles = _random_doubles(rng)
    doubles += [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 5e-324,
                2.2250738585072014e-308, 1.7976931348623157e308, 69021973408840576.0,
                9007199254740993.0]
    n = _compare(conn, types, 701, -1, "SELECT unnest(%s::float8[])", (doubles,),
                 _swap("d"), "float8send")
    singles = [struct.unpack("<f", struct.pack("<I", rng.getrandbits(32)))[0] for _ in range(N)]
    singles = [f for f in singles if f == f] + [0.0, -0.0, float("inf"), float("nan")]
    n += _compare(conn, types, 700, -1, "SELECT unnest(%s::float8[])::float4", (singles,),
                  _swap("f"), "float4send")
    assert n > 2 * N - 100


def test_numerics(conn: Any) -> None:
    rng = random.Random(SEED + 1)
    types = capture_types(conn)
    texts = []
    for _ in range(N):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 60)))
        point = rng.randrange(0, len(digits) + 1)
        s = (digits[:point] or "0") + ("." + digits[point:] if point < len(digits) else "")
        if rng.random() < 0.3:
            s += f"e{rng.randrange(-200, 200)}"
        texts.append(("-" if rng.random() < 0.4 else "") + s)
    texts += ["NaN", "Infinity", "-Infinity", "0", "0.000", "-0", "1e-1000", "9" * 300]
    n = _compare(conn, types, 1700, -1, "SELECT unnest(%s::text[])::numeric", (texts,),
                 _numeric_disk, "numeric_send")
    assert n == len(texts)


def test_dates_times_timestamps_intervals(conn: Any) -> None:
    rng = random.Random(SEED + 2)
    types = capture_types(conn)
    usecs = [rng.randrange(-211813488000000000, 9223371331200000000) for _ in range(N)]
    split = ("SELECT '2000-01-01'::{0} + (u / 86400000000) * interval '1 day' "
             "+ (u %% 86400000000) * interval '1 microsecond' FROM unnest(%s::int8[]) u")
    n = _compare(conn, types, 1114, -1, split.format("timestamp"), (usecs,), _swap("q"),
                 "timestamp_send")
    n += _compare(conn, types, 1184, -1, split.format("timestamptz"), (usecs,), _swap("q"),
                  "timestamptz_send")
    days = [rng.randrange(-2451545, 2145031949) for _ in range(N)]
    n += _compare(conn, types, 1082, -1, "SELECT date '2000-01-01' + d FROM unnest(%s::int4[]) d",
                  (days,), _swap("i"), "date_send")
    times = [rng.randrange(0, 86400000001) for _ in range(N)]
    n += _compare(conn, types, 1083, -1,
                  "SELECT time '00:00' + t * interval '1 microsecond' FROM unnest(%s::int8[]) t",
                  (times,), _swap("q"), "time_send")
    zones = [(rng.randrange(0, 86400000001), rng.randrange(-15 * 3600 - 59, 15 * 3600 + 59))
             for _ in range(N)]
    n += _compare(conn, types, 1266, -1,
                  "SELECT (time '00:00' + t * interval '1 microsecond')::timetz "
                  "AT TIME ZONE (z * interval '1 second') "
                  "FROM unnest(%s::int8[], %s::int4[]) AS u(t, z)",
                  ([t for t, _ in zones], [z for _, z in zones]), _swap("qi"), "timetz_send")
    parts = [(rng.randrange(-(2**31) + 1, 2**31 - 1), rng.randrange(-(2**31) + 1, 2**31 - 1),
              rng.randrange(-(2**62), 2**62)) for _ in range(N)]
    n += _compare(conn, types, 1186, -1,
                  "SELECT make_interval(months => m) + make_interval(days => d) "
                  "+ (t / 3600000000) * interval '1 hour' + (t %% 3600000000) * "
                  "interval '1 microsecond' FROM unnest(%s::int4[], %s::int4[], %s::int8[]) "
                  "AS u(m, d, t)",
                  ([m for m, _, _ in parts], [d for _, d, _ in parts],
                   [t for _, _, t in parts]), _swap("qii"), "interval_send")
    assert n == 6 * N


def test_money_and_integers(conn: Any) -> None:
    rng = random.Random(SEED + 3)
    types = capture_types(conn)
    cents = [rng.randrange(-(2**63), 2**63) for _ in range(N)] + [-(2**63), 2**63 - 1, 0]
    n = _compare(conn, types, 790, -1,
                 "SELECT (c::numeric / 100)::money FROM unnest(%s::int8[]) c", (cents,),
                 _swap("q"), "cash_send")
    oids = [rng.randrange(0, 2**32) for _ in range(N)]
    n += _compare(conn, types, 26, -1, "SELECT o::oid FROM unnest(%s::int8[]) o", (oids,),
                  _swap("I"), "oidsend")
    assert n == 2 * N + 3
