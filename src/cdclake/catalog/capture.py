"""Dictionary capture over SQL, and the last-resort resolver for unexplained relfilenodes.

The WAL is the primary source (messages, pg_class rows). SQL only helps for what it can still
see *now*: a relfilenode that exists now maps to the same relation it mapped to when written
(relfilenodes are not reused while the relation lives), so SQL may say *which* relation a
relfilenode belongs to — but the definition used is always the WAL-derived version valid at the
change's LSN, never today's: no tuple is decoded with a guessed schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from cdclake.catalog.connection import connect
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion
from cdclake.errors import SourceError, redact
from cdclake.wal.lsn import parse_lsn
from cdclake.wal.record import RelFileLocator


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


def sql_resolver(dsn: str, dictionary: Dictionary) -> Callable[[RelFileLocator, int],
                                                                RelationVersion | None]:
    """Map a relfilenode the WAL did not explain to its owner via SQL, if it still exists."""

    def resolve(loc: RelFileLocator, lsn: int) -> RelationVersion | None:
        import psycopg

        try:
            with connect(dsn) as conn:
                row = conn.execute(
                    "SELECT c.oid FROM pg_class c, pg_database d "
                    "WHERE d.datname = current_database() AND pg_relation_filenode(c.oid) = %s "
                    "AND (CASE WHEN c.reltablespace = 0 THEN d.dattablespace "
                    "ELSE c.reltablespace END) = %s", (loc.rel, loc.spc)).fetchone()
        except psycopg.Error as exc:
            raise SourceError(f"cannot resolve relfilenode {loc} over SQL: {exc}") from exc
        if row is None:
            return None
        known = dictionary.relation_for_oid(int(row[0]), lsn)
        if known is None:
            return None
        v = dataclasses.replace(known, relfilenode=loc.rel, tablespace=loc.spc)
        dictionary.add_version(v)
        return v

    return resolve
