"""Test-only: inline-compressed datums captured from a real server, for the server-less unit
tests (tests/unit/tuples/fixtures/compressed.json).

Regenerate with ``python -m tests.oracle.tuples.compressed_fixtures`` (starts PostgreSQL 15,
which has lz4); test_compressed_fixtures_oracle checks the committed file still matches what
each server writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cdclake.tuples.heap import deform
from tests.oracle.tuples.pagetuples import capture_columns, read_relation, set_session

FIXTURE = Path(__file__).parents[2] / "unit" / "tuples" / "fixtures" / "compressed.json"

#: (name, column type, value expression); each is stored inline-compressed
VALUES: list[tuple[str, str, str]] = [
    ("repeated", "text", "repeat('abcdefgh', 400)"),
    ("words", "text", "(SELECT string_agg(w, ' ') FROM (SELECT (ARRAY['alpha', 'beta', "
                      "'gamma', 'delta', 'epsilon'])[1 + g % 5] || g % 13 AS w "
                      "FROM generate_series(1, 600) g) s)"),
    ("long_run", "text", "repeat('z', 5000) || 'end'"),
    ("unicode", "text", "repeat('héllo wörld ✓ 𝄞 ', 200)"),
    ("jsonb", "jsonb", "(SELECT jsonb_agg(jsonb_build_object('n', g, 'v', repeat('x', g % 9))) "
                       "FROM generate_series(1, 120) g)"),
    ("int_array", "int4[]", "(SELECT array_agg(g % 10) FROM generate_series(1, 1500) g)"),
]


def capture(conn: Any, method: str) -> list[dict[str, str]]:
    """Insert every value into a ``method``-compressed column; return the on-disk datums."""
    out = []
    for name, typ, expr in VALUES:
        table = f"fx_{method}_{name}"
        conn.execute(f"CREATE TABLE {table} (v {typ} COMPRESSION {method})")
        conn.execute(f"INSERT INTO {table} VALUES ({expr})")
        cols = capture_columns(conn, table)
        (tup,) = read_relation(conn, table).values()
        (datum,) = deform(tup, cols)
        assert isinstance(datum, bytes) and datum[0] & 3 == 2, f"{name} is not inline-compressed"
        text = conn.execute(f"SELECT format('%s', v) FROM {table}").fetchone()[0]
        out.append({"name": name, "type": typ, "method": method, "datum": datum.hex(),
                    "text": text})
    return out


def main() -> None:  # pragma: no cover - a maintenance tool
    from cdclake.local.postgres import LocalPostgres

    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        pg.create_database("fx")
        with pg.connect("fx") as conn:
            conn.execute("CREATE EXTENSION pageinspect")
            set_session(conn)
            fixtures = capture(conn, "pglz") + capture(conn, "lz4")
    finally:
        pg.destroy()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(fixtures, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(fixtures)} fixtures to {FIXTURE}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
