"""Every edge value of the type mapping, from a real PostgreSQL to an Iceberg mirror and back.

The values are written on PostgreSQL 15 and 18, decoded from the archived WAL with the Arrow
plugin in two batches, merged into Iceberg mirrors (and changelogs), and read back with DuckDB.
Every cell must equal the source: its typed value as the server itself computes it (dates and
timestamps as days/µs since 1970, ±infinity as DuckDB's encodings), or — for a value without a
typed representation — NULL in its column and ``_cdc_pg_text[attnum]`` equal to the source's
``col::text`` under TimeZone UTC, DateStyle ISO and lc_monetary C. Which cells must be text is
listed explicitly, so a typeable value silently turned into text fails too. Our test_decoding
output for the same WAL must still equal a real test_decoding slot's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from cdclake.catalog.dictionary import Dictionary
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import ArrowChanges
from cdclake.decoding.session import DecodeOptions, decode
from cdclake.lake.batch import read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.merge import merge_batch, mirror_identifier
from cdclake.local.postgres import LocalPostgres
from cdclake.wal.source import DirectorySource
from tests.oracle.decoding.harness import (
    Capture,
    archive_all,
    as_lines,
    diff,
    oracle,
    ours,
    prepare,
)
from tests.support.duck import connect, read_table

pytestmark = pytest.mark.e2e

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SOURCE_SETTINGS = ("SET TimeZone = 'UTC'", "SET DateStyle = 'ISO, YMD'",
                   "SET IntervalStyle = 'postgres'", "SET extra_float_digits = 1",
                   "SET lc_monetary = 'C'", "SET bytea_output = 'hex'")

#: a 2-D text[] big enough to be stored out of line (TOASTed): an UPDATE that leaves it alone
#: logs it as unchanged, and the mirror must keep its text from the stored row
BIG_2D = ("(SELECT array_agg(ARRAY[md5(i::text), md5((-i)::text)]) "
          "FROM generate_series(1, 200) AS i)")

SETUP = [
    """CREATE TABLE edge (
         id int PRIMARY KEY, v text,
         d date, ts timestamp, tstz timestamptz, t time, ttz timetz, iv interval,
         n numeric(10,2), nu numeric, big numeric(40,5), m money,
         ia int[], da date[], tsa timestamp[], na numeric(10,2)[], ta time[], tta text[],
         big2d text[])""",
    "ALTER TABLE edge ALTER COLUMN big2d SET STORAGE EXTERNAL",
    "CREATE TABLE edge_full (a int[], n numeric(10,2), t time, d date)",
    "ALTER TABLE edge_full REPLICA IDENTITY FULL",
    "CREATE TABLE edge_key (k numeric(10,2) PRIMARY KEY, v text)",
]

EDGE_COLUMNS = ("id, v, d, ts, tstz, t, ttz, iv, n, nu, big, m, ia, da, tsa, na, ta, tta, "
                "big2d")
EDGE_ROWS = [
    # infinities, 24:00, offsets with seconds, NaN in a decimal column, multi-dimensional and
    # lower-bound arrays, arrays whose elements are edge values
    """(1, 'one', 'infinity', 'infinity', 'infinity', '24:00:00', '12:00:00+05:30:15',
        '1 year -2 mons +3 days -04:05:06.5', 'NaN', 'NaN',
        '12345678901234567890123456789012345.12345',
        '-92233720368547758.08', '{{1,2},{3,4}}', '{infinity,-infinity,2000-01-01,NULL}',
        '{infinity,-infinity}', '{1.5,NaN}', '{24:00:00}', '[0:2]={a,b,c}', NULL)""",
    # -infinity, the first day PostgreSQL has (BC), big numerics, a TOASTed 2-D array
    f"""(2, 'two', '4714-11-24 BC', '4714-11-24 00:00:00 BC', '-infinity', '00:00:00',
        '00:00:00-15:59:59', '1 day -00:00:01',
        '-99999999.99', 'Infinity', '-1.00001', '92233720368547758.07',
        '[0:2]={{7,8,9}}', '{{4714-11-24 BC}}', '{{"294276-12-31 23:59:59.999999"}}', '{{}}',
        '{{23:59:59.999999}}', '{{{{a,b}},{{c,"d e"}}}}', {BIG_2D})""",
    # years past 9999 (typed) up to PostgreSQL's last timestamp (beyond int64 µs: text)
    """(3, 'three', '5874897-12-31', '294276-12-31 23:59:59.999999',
        '294247-01-10 04:00:54.775806+00', '23:59:59.999999', '24:00:00-15:59',
        '0', 'NaN', '-Infinity', '0.00000', '0',
        '{1,NULL,3}', '{10000-01-01}', '{294247-01-10 04:00:54.775806}', '{NULL,-0.01}',
        '{00:00:00}', '{"a b",NULL,"",NULL}', NULL)""",
    # the first timestamp past int64 µs from 1970; huge and tiny unconstrained numerics
    """(4, 'four', '10000-01-01', '294247-01-10 04:00:54.775807', '4714-11-24 00:00:00+00 BC',
        '12:34:56.789', '23:59:59.999999+15:59:59', '-1 days', '0.01',
        repeat('9', 1000)::numeric, NULL, '-1.23', '{}', '{}', '{}', '{}', '{}', '{}', NULL)""",
    """(5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
        NULL, NULL, NULL, NULL, NULL)""",
]

BATCH1 = [
    f"INSERT INTO edge ({EDGE_COLUMNS}) VALUES " + ", ".join(EDGE_ROWS),
    "INSERT INTO edge (id, nu) VALUES (6, ('0.' || repeat('0', 999) || '1')::numeric)",
    """INSERT INTO edge_full VALUES ('{{1}}', 'NaN', '24:00:00', 'infinity'),
         ('{{2}}', 'NaN', '24:00:00', 'infinity'), ('{1}', 1.00, '10:00', '2000-01-01'),
         ('[2:2]={5}', NULL, NULL, '-infinity')""",
    "INSERT INTO edge_key VALUES ('NaN', 'nan'), (1.00, 'one'), (2.00, 'two')",
    # changed inside the batch: the row's text goes, the typed value comes
    "UPDATE edge SET ia = '{5}', n = 1.00 WHERE id = 4",
]

BATCH2 = [
    # untyped -> typed: the row's map must lose the attnum, not keep the old text
    "UPDATE edge SET n = 2.50, ia = '{9}', t = '01:02:03' WHERE id = 1",
    # typed -> untyped (and a typed value past year 9999)
    "UPDATE edge SET n = 'NaN', t = '24:00:00', d = '5874897-12-31' WHERE id = 4",
    # big2d is TOASTed and not touched: logged as unchanged, its text comes from the mirror
    "UPDATE edge SET v = 'two, updated', d = '2000-02-29' WHERE id = 2",
    "DELETE FROM edge WHERE id = 5",
    # identity FULL: the old row (with untyped values) finds exactly one stored row
    "DELETE FROM edge_full WHERE a = '{{1}}'",
    "UPDATE edge_full SET t = '23:00:00' WHERE a = '{{2}}'",
    # keys without a typed value: changed away from, deleted, changed to
    "UPDATE edge_key SET k = 3.00 WHERE k = 'NaN'",
    "DELETE FROM edge_key WHERE k = 1.00",
    "UPDATE edge_key SET k = 'NaN' WHERE k = 2.00",
    # rows written before ADD COLUMN ... DEFAULT read the default (attmissingval)
    "ALTER TABLE edge_key ADD COLUMN dn numeric(10,2) DEFAULT 'NaN'",
    "ALTER TABLE edge_key ADD COLUMN dd date DEFAULT 'infinity'",
    "INSERT INTO edge_key (k, v) VALUES (7.00, 'seven')",
]

#: (table, column) -> the source texts that must arrive as text (everything else typed)
UNTYPED: dict[tuple[str, str], set[str]] = {
    ("edge", "t"): {"24:00:00"},
    ("edge", "ts"): {"294276-12-31 23:59:59.999999", "294247-01-10 04:00:54.775807"},
    ("edge", "n"): {"NaN"},
    ("edge", "ia"): {"[0:2]={7,8,9}"},
    ("edge", "tsa"): {'{"294276-12-31 23:59:59.999999"}'},
    ("edge", "na"): {"{1.50,NaN}"},
    ("edge", "ta"): {"{24:00:00}"},
    ("edge", "tta"): {"[0:2]={a,b,c}", '{{a,b},{c,"d e"}}'},
    ("edge", "big2d"): set(),  # filled from the source: the TOASTed 2-D array
    ("edge_full", "a"): {"{{2}}", "[2:2]={5}"},
    ("edge_full", "n"): {"NaN"},
    ("edge_key", "k"): {"NaN"},
    ("edge_key", "dn"): {"NaN"},
}

#: column kind -> SQL computing the typed (Arrow storage) value as text, from ``{c}``
SCALAR = {
    "int": "{c}::text",
    "num": "{c}::text",
    "str": "{c}::text",
    "date": "CASE WHEN {c} = 'infinity' THEN '2147483647' WHEN {c} = '-infinity' "
            "THEN '-2147483647' ELSE ({c} - date '1970-01-01')::text END",
    "ts": "CASE WHEN {c} = 'infinity' THEN '9223372036854775807' WHEN {c} = '-infinity' "
          "THEN '-9223372036854775807' ELSE (extract(epoch from {c}) * 1000000)::text END",
    "time": "(extract(epoch from {c}) * 1000000)::text",
}
KINDS = {
    "edge": {"id": "int", "v": "str", "d": "date", "ts": "ts", "tstz": "ts", "t": "time",
             "ttz": "str", "iv": "str", "n": "num", "nu": "str", "big": "str", "m": "str",
             "ia": "int[]", "da": "date[]", "tsa": "ts[]", "na": "num[]", "ta": "time[]",
             "tta": "str[]", "big2d": "str[]"},
    "edge_full": {"a": "int[]", "n": "num", "t": "time", "d": "date"},
    "edge_key": {"k": "num", "v": "str", "dn": "num", "dd": "date"},
}


def _expected_sql(column: str, kind: str) -> str:
    c = f'"{column}"'
    if not kind.endswith("[]"):
        return SCALAR[kind].format(c=c)
    elem = SCALAR[kind[:-2]].format(c="e")
    return (f"CASE WHEN {c} IS NOT NULL THEN coalesce((SELECT array_agg({elem} ORDER BY o) "
            f"FROM unnest({c}) WITH ORDINALITY AS u(e, o)), '{{}}') END")


def _convert(kind: str) -> Callable[[Any], Any]:
    base = kind.removesuffix("[]")
    one: Callable[[str], Any] = {"num": Decimal, "str": str}.get(base, lambda s: int(Decimal(s)))
    if kind.endswith("[]"):
        return lambda v: None if v is None else [None if x is None else one(x) for x in v]
    return lambda v: None if v is None else one(v)


@dataclass(frozen=True)
class Cell:
    text: str | None  #: col::text
    typed: Any  #: the typed value as the server computes it (meaningless when untypeable)


def source_rows(pg: LocalPostgres, database: str, table: str) -> list[dict[str, Cell]]:
    kinds = KINDS[table]
    exprs = ", ".join(f'"{c}"::text, {_expected_sql(c, k)}' for c, k in kinds.items())
    with pg.connect(database) as conn:
        for s in SOURCE_SETTINGS:
            conn.execute(s)
        rows = conn.execute(f"SELECT {exprs} FROM {table}").fetchall()
    out = []
    for row in rows:
        cells = {}
        for i, (c, k) in enumerate(kinds.items()):
            text, typed = row[2 * i], row[2 * i + 1]
            try:
                value = _convert(k)(typed)
            except ArithmeticError:
                value = None  # NaN in a decimal: untypeable, compared as text
            cells[c] = Cell(text, value)
        out.append(cells)
    return out


def _storage(col: pa.ChunkedArray) -> list[Any]:
    """DuckDB's values with dates/times as their Arrow storage integers."""
    t = col.type
    target = {pa.types.is_date32: pa.int32(), pa.types.is_timestamp: pa.int64(),
              pa.types.is_time64: pa.int64()}
    elem = t.value_type if pa.types.is_list(t) else t
    for test, storage in target.items():
        if test(elem):
            return col.cast(pa.list_(storage) if pa.types.is_list(t) else storage).to_pylist()
    return col.to_pylist()


def mirror_rows(data: pa.Table, attnums: dict[str, int], columns: Sequence[str]
                ) -> list[dict[str, tuple[str, Any]]]:
    """Each mirror row as column -> ('text', exact text) or ('value', typed value)."""
    values = {c: _storage(data.column(c)) for c in columns}
    texts = data.column("_cdc_pg_text").to_pylist()
    out = []
    for i in range(data.num_rows):
        exact = dict(texts[i] or {})
        row = {}
        for c in columns:
            key = str(attnums[c])
            if key in exact:
                assert values[c][i] is None, (c, values[c][i], exact[key])
                row[c] = ("text", exact.pop(key))
            else:
                row[c] = ("value", values[c][i])
        assert not exact, f"_cdc_pg_text names attnums {sorted(exact)} of no column"
        out.append(row)
    return out


def _matches(got: dict[str, tuple[str, Any]], want: dict[str, Cell]) -> bool:
    for c, (how, v) in got.items():
        cell = want[c]
        if how == "text":
            if v != cell.text:
                return False
        elif cell.text is None:
            if v is not None:
                return False
        elif v != cell.typed:
            return False
    return True


def compare(table: str, mirror: list[dict[str, tuple[str, Any]]],
            source: list[dict[str, Cell]]) -> set[tuple[str, str, str]]:
    """Match mirror rows to source rows one to one (a multiset: FULL tables have no key);
    returns the (table, column, text) of every cell that arrived as text."""
    left = list(source)
    untyped = set()
    for row in mirror:
        match = next((s for s in left if _matches(row, s)), None)
        assert match is not None, f"{table}: mirror row {row} matches no source row in {left}"
        left.remove(match)
        untyped |= {(table, c, v) for c, (how, v) in row.items() if how == "text"}
    assert not left, f"{table}: source rows missing from the mirror: {left}"
    return untyped


def _decode_batch(pg: LocalPostgres, cap: Capture, root: Path, name: str, start: int,
                  end: int, spill: Path) -> None:
    fs = pafs.LocalFileSystem()
    plugins: list[ArrowChanges] = []

    def make(d: Dictionary, _version: int) -> ArrowChanges:
        plugins.append(ArrowChanges(fs, str(root / name), name, d.types, rows_per_part=7))
        return plugins[0]

    options = DecodeOptions(db_oid=cap.db_oid, start_lsn=start, read_from=cap.read_from,
                            end_lsn=end, spill_dir=spill, ddl_key=cap.key)
    decode(DirectorySource(pg.archive_dir), Dictionary(), options, make)
    plugins[0].close(start, end)


def _run(pg: LocalPostgres, database: str, steps: Sequence[str]) -> None:
    with pg.connect(database) as conn:
        for sql in steps:
            conn.execute(sql)


def test_edge_values_reach_the_mirror_exactly(pg: LocalPostgres, database: str,
                                              tmp_path: Path) -> None:
    cap = prepare(pg, database, SETUP)
    try:
        _run(pg, database, BATCH1)
        end1 = archive_all(pg, database)
        _run(pg, database, BATCH2)
        end2 = archive_all(pg, database)
        cap.end_lsn = end2
        # the texts kept for untyped values are our test_decoding texts: still PostgreSQL's
        expected = as_lines(oracle(pg, cap))
        actual, _ = ours(pg, cap, spill_dir=tmp_path / "spill-td")
        assert actual == expected, diff(expected, actual)
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))

    root = tmp_path / "changes"
    _decode_batch(pg, cap, root, "b1", cap.start_lsn, end1, tmp_path / "spill")
    _decode_batch(pg, cap, root, "b2", end1, end2, tmp_path / "spill")

    config = Config(home=tmp_path / "home", stream="edge")
    catalog = open_catalog(config)
    for name in ("b1", "b2"):
        report = merge_batch(catalog, config, read_batch(root, name), changelog=True)
        for t in report.tables:
            assert t.not_found == 0, t
    big = pg.sql(f"SELECT {BIG_2D}::text", database)[0][0]
    untyped_expected = {(t, c, text) for (t, c), texts in UNTYPED.items() for text in texts}
    untyped_expected.add(("edge", "big2d", big))

    con = connect()
    try:
        untyped: set[tuple[str, str, str]] = set()
        for table, kinds in KINDS.items():
            mirror = catalog.load_table(mirror_identifier(config, "public", table))
            attnums = {f.name: int(f.doc.rsplit("=", 1)[1]) for f in mirror.schema().fields
                       if not f.name.startswith("_cdc_")}
            data = read_table(mirror, con)
            untyped |= compare(table, mirror_rows(data, attnums, list(kinds)),
                               source_rows(pg, database, table))
        assert untyped == untyped_expected

        # DuckDB shows PostgreSQL's infinities as its own
        edge = catalog.load_table(mirror_identifier(config, "public", "edge"))
        location = edge.metadata_location.removeprefix("file://")
        shown = con.execute("SELECT d::varchar, tstz::varchar FROM iceberg_scan(?) "
                            "WHERE id = 1", [location]).fetchall()
        assert shown == [("infinity", "infinity")]
        changelog = catalog.load_table(("cdc", "public__edge_key__changelog"))
        log = read_table(changelog, con).select(
            ["_cdc_op", "_cdc_pg_text", "_cdc_old_key"]).to_pylist()
        texts = [dict(r["_cdc_pg_text"] or {}) for r in log if r["_cdc_op"] != "D"]
        assert {"1": "NaN"} in texts  # the inserted NaN key
        assert any(r["_cdc_old_key"] == '{"k": "NaN"}' for r in log)
    finally:
        con.close()
