"""Dictionary capture over SQL: a full dictionary as the source has it now, and its OID.

Decoding never asks SQL what a relfilenode is: the WAL says it (messages, pg_class rows), the
same for ``cdclake decode`` and the Spark job, so the two cannot disagree, and a relfilenode
the WAL does not explain stops both with the same error.
"""

from __future__ import annotations

from cdclake.catalog.connection import connect
from cdclake.catalog.dictionary import Dictionary
from cdclake.errors import SourceError, redact
from cdclake.lsn import parse_lsn


def capture(dsn: str) -> tuple[int, Dictionary]:
    """A fresh full dictionary and the LSN it is valid from."""
    import psycopg

    try:
        with connect(dsn) as conn:
            installed = conn.execute(
                "SELECT to_regprocedure('cdclake.dictionary_json()') IS NOT NULL").fetchone()[0]
            if not installed:
                raise SourceError("cdclake is not installed in the source database: run "
                                  "`cdclake source install --dsn ...` first")
            with conn.transaction():
                payload, lsn = conn.execute(
                    "SELECT cdclake.dictionary_json()::text, pg_current_wal_lsn()::text"
                ).fetchone()
    except psycopg.Error as exc:
        raise SourceError(f"cannot capture the dictionary from the source ({redact(dsn)}): {exc}") \
            from exc
    at = parse_lsn(lsn)
    d = Dictionary()
    d.apply_message(at, payload)
    return at, d


def database_oid(dsn: str) -> int:
    """The source database's OID: it selects which records of the WAL are decoded."""
    import psycopg

    try:
        with connect(dsn) as conn:
            row = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    except psycopg.Error as exc:
        raise SourceError(f"cannot connect to the source ({redact(dsn)}): {exc}") from exc
    assert row is not None
    return int(row[0])
