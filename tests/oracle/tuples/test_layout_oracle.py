"""Oracle: tuple layouts — dropped columns, ADD COLUMN ... DEFAULT (attmissingval), NULLs in
many positions of wide rows, and names that need quoting."""

from __future__ import annotations

import random
from typing import Any

import pytest
from psycopg import sql

from cdclake.tuples import heap
from cdclake.tuples.codecs import codec_for
from cdclake.tuples.desc import MissingValue
from cdclake.tuples.varlena import payload
from tests.oracle.tuples.harness import decode_table
from tests.oracle.tuples.pagetuples import capture_types, read_relation

pytestmark = pytest.mark.oracle

TABLE = '"we""ird Tbl"'

#: columns added with a default after rows exist: (name, type, default literal)
ADDED = [
    ("m_int", "int4", "42"),
    ("m text", "text", "'hello, \"world\"'"),
    ("m_num", "numeric(10,2)", "1.5"),
    ("m_arr", "int4[]", "'{1,NULL,3}'"),
    ("m_tstz", "timestamptz", "'2020-01-01 00:00+05'"),
    ("m_mood", "mood", "'ok'"),
    ("m_json", "jsonb", "'{\"a\": [1, \"x\"]}'"),
    ("m_bool", "bool", "false"),
    ("m_date", "date", "'infinity'"),
    ("m_f8", "float8", "'NaN'"),
    ("m_f4", "float4", "0.1"),
    ("m_bytea", "bytea", "'\\x00ff'"),
    ("m_ts", "timestamp", "'1999-12-31 23:59:59.5'"),
    ("m_time", "time", "'12:00:00.25'"),
    ("m_uuid", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("m_txtarr", "text[]", "'{\"a b\",NULL,\"\"}'"),
]


def test_dropped_and_missing_columns(conn: Any) -> None:
    conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    conn.execute(f'CREATE TABLE {TABLE} (id int, "Col ""q""" text, drop_me numeric, '
                 'x int8, "UPPER" date, drop_too text)')
    conn.execute(f"INSERT INTO {TABLE} SELECT g, 'v' || g, g * 1.5, g * 10, "
                 "date '2000-01-01' + g, repeat('d', g) FROM generate_series(1, 5) g")
    conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN drop_me")
    conn.execute(f"INSERT INTO {TABLE} (id, \"Col \"\"q\"\"\", x) VALUES (6, NULL, 60)")
    for name, typ, default in ADDED:
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {} DEFAULT {}").format(
            sql.SQL(TABLE), sql.Identifier(name), sql.SQL(typ), sql.SQL(default)))
    conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN no_default text")
    conn.execute(f"ALTER TABLE {TABLE} DROP COLUMN drop_too")
    # a row written after the ADDs: its values are the defaults, physically present
    conn.execute(f"INSERT INTO {TABLE} (id) VALUES (100)")
    conn.execute(f"INSERT INTO {TABLE} (id, m_int, \"m text\") VALUES (101, NULL, 'set')")
    conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN m_int").format(sql.SQL(TABLE)))

    result = decode_table(conn, TABLE)
    assert result.mismatches == []
    cols = result.columns
    assert sum(c.dropped for c in cols) == 3
    missing = [c for c in cols if c.has_missing and not c.dropped]
    assert {c.name for c in missing} == {n for n, _, _ in ADDED} - {"m_int"}

    # rows written before the ADDs carry MissingValue; value_from_text of it must equal the
    # value decoded from the row (id 100) that stores the same default physically
    types = capture_types(conn)
    tuples = list(read_relation(conn, TABLE).values())
    deformed = [heap.deform(t, cols) for t in tuples]
    by_id = {int.from_bytes(d[0], "little", signed=True): d for d in deformed}
    stored = by_id[100]
    n_missing = 0
    for c in missing:
        codec = codec_for(c.type_oid, c.typmod, types, column=c.name, relation=TABLE)
        raw = stored[c.attnum - 1]
        assert isinstance(raw, bytes)
        physical = codec.value(payload(raw) if codec.typisvarlena else raw)
        for old_id in range(1, 7):
            d = by_id[old_id][c.attnum - 1]
            assert isinstance(d, MissingValue), (c.name, old_id, d)
            assert d.text == codec.text(payload(raw) if codec.typisvarlena else raw)
            from_text = codec.value_from_text(d.text)
            assert from_text == physical or (from_text != from_text and physical != physical), \
                (c.name, from_text, physical)
            n_missing += 1
    assert n_missing == 6 * len(missing)
    # the column added without a default reads NULL in old rows, not a MissingValue
    nd = next(c for c in cols if c.name == "no_default")
    assert all(by_id[i][nd.attnum - 1] is None for i in range(1, 7))


WIDE_TYPES = ["int2", "int4", "int8", "text", "float8", "bool", "numeric", "bpchar(3)",
              "timestamp", "float4", "date", "interval", "varchar(5)", "uuid", "int4[]",
              "\"char\"", "timetz", "jsonb", "name", "point"]
WIDE_VALUES = ["7", "-8", "9000000000", "'t'", "2.5", "true", "1.25", "'ab'",
               "'2020-02-02 02:02:02'", "1.5", "'2001-01-01'", "'1 day 1 hour'", "'xyz'",
               "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'{1,2}'", "'q'", "'01:00+01'",
               "'{\"k\": 1}'", "'nm'", "'(1,2)'"]


def test_nulls_in_many_positions_of_wide_rows(conn: Any) -> None:
    """60 columns (alignments c/s/i/d, short and long varlenas), rows with random NULL
    patterns (null bitmaps of 8 bytes), an all-NULL row and a row without NULLs."""
    ncols = 60
    cols = [(f"w{i}", WIDE_TYPES[i % len(WIDE_TYPES)], WIDE_VALUES[i % len(WIDE_VALUES)])
            for i in range(ncols)]
    conn.execute("CREATE TABLE wide (" + ", ".join(f"{n} {t}" for n, t, _ in cols) + ")")
    rng = random.Random(20240601)
    patterns = [[False] * ncols, [True] * ncols]
    patterns += [[rng.random() < 0.5 for _ in range(ncols)] for _ in range(40)]
    patterns += [[i % k == 0 for i in range(ncols)] for k in range(2, 9)]
    for present in patterns:
        values = ", ".join(f"({v})::{t}" if p else "NULL"
                           for (_, t, v), p in zip(cols, present, strict=True))
        conn.execute(f"INSERT INTO wide VALUES ({values})")
    result = decode_table(conn, "wide")
    assert result.mismatches == []
    assert result.compared == ncols * len(patterns)
    # trailing NULLs: PostgreSQL keeps natts = all columns; rows still decode as above
    got_nulls = sum(1 for row in result.rows.values() for exp, _ in row.values() if exp is None)
    assert got_nulls == sum(not p for present in patterns for p in present)


def test_columns_and_tables_named_with_quotes_and_case(conn: Any) -> None:
    conn.execute('CREATE SCHEMA "Sch ""x"""')
    conn.execute('CREATE TABLE "Sch ""x"""."Tab" ("a""b" int, "select" text, "ÜNI" numeric, '
                 '"with space" int8[])')
    conn.execute('INSERT INTO "Sch ""x"""."Tab" VALUES (1, \'s\', 2.5, \'{1,NULL}\'), '
                 "(NULL, NULL, NULL, NULL)")
    result = decode_table(conn, '"Sch ""x"""."Tab"')
    assert result.mismatches == []
    assert [c.name for c in result.columns] == ['a"b', "select", "ÜNI", "with space"]
    assert result.compared == 8
