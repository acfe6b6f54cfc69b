"""Micro-benchmark of the tuple hot path: deform + payload + codec text/value for a typical row.

The row is (id int4, account int8, name text, note text (NULL), created timestamptz,
amount numeric(12,2), active bool, email varchar), laid out as PostgreSQL writes it. Prints
rows per second for text output (test_decoding's path) and for Arrow values (the lake's path).

    .venv/bin/python bench/codecs.py [--rows N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import struct
import time
from collections.abc import Callable

from cdclake.catalog.model import Column, TypeInfo
from cdclake.tuples.codecs import codec_for
from cdclake.tuples.desc import MissingValue
from cdclake.tuples.heap import deform
from cdclake.tuples.varlena import payload
from cdclake.wal.record import WalTuple

TYPES = {
    16: TypeInfo(16, "boolean", "boolout", 1, True, "c", "b", "B"),
    20: TypeInfo(20, "bigint", "int8out", 8, True, "d", "b", "N"),
    23: TypeInfo(23, "integer", "int4out", 4, True, "i", "b", "N"),
    25: TypeInfo(25, "text", "textout", -1, False, "i", "b", "S"),
    1043: TypeInfo(1043, "character varying", "varcharout", -1, False, "i", "b", "S"),
    1184: TypeInfo(1184, "timestamp with time zone", "timestamptz_out", 8, True, "d", "b", "D"),
    1700: TypeInfo(1700, "numeric", "numeric_out", -1, False, "i", "b", "N"),
}
# name, type oid, typmod
SCHEMA = [("id", 23, -1), ("account", 20, -1), ("name", 25, -1), ("note", 25, -1),
          ("created", 1184, -1), ("amount", 1700, ((12 << 16) | 2) + 4), ("active", 16, -1),
          ("email", 1043, 104)]


def _columns() -> list[Column]:
    out = []
    for i, (name, oid, typmod) in enumerate(SCHEMA):
        t = TYPES[oid]
        out.append(Column(i + 1, name, name, oid, typmod, t.typlen, t.typalign, t.typbyval))
    return out


def _row() -> WalTuple:
    """One tuple: note is NULL, so there is a null bitmap; offsets as heap_fill_tuple."""
    short = lambda b: bytes([((len(b) + 1) << 1) | 1]) + b  # noqa: E731
    numeric = struct.pack("<Hhhh", 2, 0, 1234, 5600)  # 1234.56 (NumericLong, dscale 2)
    datums = [(4, struct.pack("<i", 123456)), (8, struct.pack("<q", 9876543210)),
              (4, short(b"Alice Example")), None,
              (8, struct.pack("<q", 774_000_000_123_456)), (4, short(numeric)),
              (1, b"\x01"), (4, short(b"alice@example.com"))]
    hoff = 24  # 23 + 1 byte of null bitmap, MAXALIGNed
    bits = 0
    body = bytearray()
    for i, d in enumerate(datums):
        if d is None:
            continue
        bits |= 1 << i
        align, raw = d
        if not (raw[0] & 1 and align == 4 and raw is not datums[0]):  # short varlenas: no pad
            while (hoff + len(body)) % align:
                body.append(0)
        body += raw
    return WalTuple(len(datums), 0x0001 | 0x0002, hoff, bytes([bits]) + bytes(body))


def run(rows: int, values: bool) -> float:
    cols = _columns()
    codecs = [codec_for(c.type_oid, c.typmod, TYPES, column=c.name) for c in cols]
    plan = [(i, c.typisvarlena, c.value if values else c.text) for i, c in enumerate(codecs)]
    tup = _row()
    start = time.perf_counter()
    for _ in range(rows):
        datums = deform(tup, cols)
        for i, varlen, fn in plan:
            d = datums[i]
            if d is None or isinstance(d, MissingValue):
                continue
            fn(payload(d) if varlen else d)  # type: ignore[arg-type]
    return rows / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = ap.parse_args()
    sample = _check_row()
    print(f"row: {sample}")
    for label, values in (("text", False), ("arrow values", True)):
        job: Callable[[], float] = lambda v=values: run(args.rows, v)  # noqa: E731
        if args.profile:
            prof = cProfile.Profile()
            rate = prof.runcall(job)
            pstats.Stats(prof).sort_stats("tottime").print_stats(8)
        else:
            rate = job()
        print(f"deform + {label}: {rate:,.0f} rows/s ({len(SCHEMA)} columns)")


def _check_row() -> list[str | None]:
    """The benchmark row decoded once, so a broken layout cannot go unnoticed."""
    cols = _columns()
    codecs = [codec_for(c.type_oid, c.typmod, TYPES, column=c.name) for c in cols]
    out: list[str | None] = []
    for codec, d in zip(codecs, deform(_row(), cols), strict=True):
        out.append(None if d is None else codec.text(  # type: ignore[arg-type]
            payload(d) if codec.typisvarlena else d))  # type: ignore[arg-type]
    expected = ["123456", "9876543210", "Alice Example", None, "2024-07-11 08:00:00.123456+00",
                "1234.56", "t", "alice@example.com"]
    if out != expected:
        raise SystemExit(f"benchmark row decodes wrongly: {out} != {expected}")
    return out


if __name__ == "__main__":
    main()
