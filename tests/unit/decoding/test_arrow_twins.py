"""The compiled Arrow row (``arrow.py`` compiled as itself, its columns ``_columns.pyx``'s)
against the same module run by Python, on random and malformed datums of the types it types
without calling a codec (int2, int4, int8, UTF-8 text, bool, uuid, bytea, float8), a type
whose values may have no Arrow form (time: 24:00:00), values of columns added later
(MissingValue), TOAST chunks, old keys and changes without a new tuple: the same buffered
rows, and the same error where Python raises one. No server."""

from __future__ import annotations

import math
import random
import struct

import pyarrow as pa

from cdclake import native
from cdclake.catalog.model import Column, RelationVersion
from cdclake.decoding.changes import DELETE, INSERT, UPDATE, Change, TxnInfo
from cdclake.decoding.plugins.arrow import ArrowRows
from cdclake.tuples.desc import MissingValue
from tests.unit.decoding.test_test_decoding_twins import TYPES, Given, _datum
from tests.unit.tuples.builtin_types import BUILTIN

#: the test_decoding twin's columns, then a time
COLUMNS = (*TYPES, (1083, 8))
DAY_US = 86_400_000_000

REL = RelationVersion(
    oid=1, db_oid=5, tablespace=1663, relfilenode=1, schema="public", name="t",
    qualified="public.t", relkind="r", persistence="p", replident="d",
    columns=tuple(Column(attnum=i + 1, name=f"c{i}", quoted=f"c{i}", type_oid=oid, typmod=-1,
                         attlen=n, attalign="i", attbyval=n > 0)
                  for i, (oid, n) in enumerate(COLUMNS)),
    key_attnums=(1,), valid_from=0)

MISSING = {21: "7", 23: "-3", 20: "9000000000", 25: "added", 16: "t", 2950:
           "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", 17: "\\x0102", 701: "1.5", 1083:
           "24:00:00"}


def _value(rng: random.Random, oid: int, attlen: int) -> object:
    if rng.random() < 0.08:
        return MissingValue(MISSING[oid])
    if oid == 1083:
        return struct.pack("<q", rng.choice([0, DAY_US, rng.randrange(DAY_US)]))
    return _datum(rng, oid, attlen)


def _plain(v: object) -> object:
    """Floats by their bits (NaN equals itself then)."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v)) if math.isnan(v) else v
    return v


class Parts:
    """A sink keeping every part's rows, as Python values (floats by their bits)."""

    def __init__(self) -> None:
        self.rows: list[list[object]] = []

    def part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        table.validate(full=True)
        self.rows.append([[_plain(v) for v in col.to_pylist()] for col in table.columns])
        return f"part-{index}"


#: not a Change's action: the test's rows of a table rewrite and TRUNCATEs
REWRITE, TRUNCATE = -1, -2


def _rows(changes: list[tuple[int, tuple[object, ...], dict[int, list[bytes]]]]) -> list[object]:
    """What the plugin's bound callbacks make of ``changes``: each error, then its row count,
    bytes and the rows of its parts (of 64 rows: the columns are made again after each)."""
    sink = Parts()
    plugin = ArrowRows(BUILTIN, sink=sink, rows_per_part=64)
    plugin.layouts.get = lambda rel: Given(REL, BUILTIN)  # type: ignore[method-assign]
    txn = TxnInfo(7, 0x100, 0x200, 123, 0)
    out: list[object] = []
    for i, (action, tup, toast) in enumerate(changes):
        new = None if action == DELETE else tup
        old = tup if action == DELETE or (action == UPDATE and i % 2) else None
        change = Change(action, 0x100 + i, i % 3, None, old, new, True, 0)
        try:
            if action == REWRITE:
                plugin.rewrite(txn, REL, change, toast, i % 2 == 0)
            elif action == TRUNCATE:
                plugin.truncate(txn, [REL], change)
            else:
                plugin.change(txn, REL, action, change, toast)
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    buf = next(iter(plugin._buffers.values()))
    rows, pending = buf.rows, buf.pending_bytes
    plugin.finish()
    return [*out, rows, pending, sink.rows]


class Tuple(tuple):  # type: ignore[type-arg]
    """A tuple with the ``data`` the row size counts."""

    data = b"12345"


def test_the_compiled_row_equals_the_reference() -> None:
    rng = random.Random(5)
    changes = []
    for _ in range(800):
        tup = Tuple(_value(rng, oid, n) for oid, n in COLUMNS)
        toast = {1: [b"ab", b"cde"]} if rng.random() < 0.1 else {}
        changes.append((rng.choices([INSERT, UPDATE, DELETE, REWRITE, TRUNCATE],
                                    [8, 4, 4, 1, 1])[0], tup, toast))
    with native.use_python():
        assert type(ArrowRows.change).__name__ == "function"
        want = _rows(changes)
    assert type(ArrowRows.change).__name__ == "cython_function_or_method"
    got = _rows(changes)
    assert got == want
    errors = [w for w in want if isinstance(w, str)]
    assert errors and want[-3] > 200, "malformed datums raise, the others make rows"
    texts = [t for part in want[-1] for t in part[-1]]  # type: ignore[union-attr]
    assert any(texts), "a value without an Arrow form kept as text"
    assert len(want[-1]) > 3, "several parts"  # type: ignore[arg-type]


def test_the_compiled_buffer_builds_arrow_columns_in_place() -> None:
    """Compiled, a buffer's int2/int4/int8/text/float8 columns and its system columns but the
    three nearly always null are Arrow buffers filled in place; the reference's are lists."""
    def kinds() -> list[str]:
        plugin = ArrowRows(BUILTIN, sink=Parts())
        plugin.layouts.get = lambda rel: Given(REL, BUILTIN)  # type: ignore[method-assign]
        return [type(c).__name__ for c in plugin._buffer(REL).columns]

    with native.use_python():
        assert set(kinds()) == {"list"}
    got = kinds()
    # int2 int4 int8 text int4 text bool uuid bytea float8 time, then the system columns
    assert got == ["Column"] * 6 + ["list"] * 3 + ["Column", "list"] + ["Column"] * 6 + \
        ["list"] * 3
