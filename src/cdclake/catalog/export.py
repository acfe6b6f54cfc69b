"""The source side of an initial snapshot: one exported MVCC snapshot, held open, and what it
sees of the tables to copy.

As ``pg_dump -j`` does, the driver opens a REPEATABLE READ transaction, exports its snapshot
(``pg_export_snapshot()``) and keeps the transaction open while workers copy chunks in
transactions that join it (``SET TRANSACTION SNAPSHOT``): every table is copied as of one
instant. Next to it the driver records the WAL insert position read just before and just
after the snapshot, and the snapshot itself (64-bit xmin, xmax, xip): the handoff facts of
:mod:`cdclake.lake.visibility`.

The change stream begins at the install's dictionary message, so a transaction that began
before it may have changes the stream never saw. The snapshot is therefore taken only once
no transaction older than the install horizon (``cdclake.install_horizon()``, recorded by
``cdclake source install``) is still running: every such transaction is then visible in the
snapshot, its changes are in the copied rows, and the merge skips it.

The tables' definitions come from ``cdclake.dictionary_json()`` read inside the snapshot
transaction, so the copy is typed by the definition its rows were written under.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cdclake.catalog.connection import connect
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RELKIND_MATVIEW, RelationVersion
from cdclake.errors import SourceError
from cdclake.lsn import format_lsn, parse_lsn


@dataclass(frozen=True)
class SourceSnapshot:
    """An exported snapshot and its handoff facts."""

    id: str  #: pg_export_snapshot()
    lsn: int  #: WAL insert position before the snapshot was taken
    end_lsn: int  #: and after
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    taken_at_us: int  #: the transaction's start, µs since 1970 UTC
    horizon: int  #: the install horizon it waited for
    block_size: int


@dataclass(frozen=True)
class SourceTable:
    """A table to copy, as the snapshot sees it."""

    relation: RelationVersion
    blocks: int  #: relation size in blocks when the snapshot was taken
    populated: bool  #: False for a materialized view WITH NO DATA (nothing to copy)

    @property
    def name(self) -> str:
        return f"{self.relation.schema}.{self.relation.name}"


@dataclass(frozen=True)
class FollowedTable:
    """A followed table with rows of its own, as the catalog lists it now."""

    oid: int
    schema: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


#: tables, partitions and matviews cdclake follows (partitioned parents hold no rows)
_FOLLOWED = """
SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND cdclake.is_followed(c.oid) ORDER BY 2, 3
"""


def followed_tables(dsn: str) -> list[FollowedTable]:
    """The followed tables with rows, by a plain catalog read (no snapshot is held)."""
    import psycopg

    conn = _connect(dsn)
    try:
        with conn:
            _install_horizon(conn)
            return [FollowedTable(int(o), s, t) for o, s, t in conn.execute(_FOLLOWED)]
    except psycopg.Error as exc:
        raise SourceError(f"initial snapshot: cannot list the source's tables: "
                          f"{_first_line(exc)}") from exc


@dataclass
class HeldSnapshot:
    """What :func:`export_snapshot` yields while its transaction is open."""

    snapshot: SourceSnapshot
    dictionary: Dictionary  #: the definitions the snapshot sees, valid from ``snapshot.lsn``
    conn: Any  #: the psycopg connection holding the transaction

    def tables(self, only: Sequence[str] = ()) -> list[SourceTable]:
        """The followed tables with rows of their own (tables, partitions, matviews — not
        partitioned parents), in name order, restricted to ``only`` (``schema.table``)."""
        rels = [v for v in self.dictionary.versions()
                if v.is_user_table and not v.dropped and not v.rewrite_of
                and (not only or f"{v.schema}.{v.name}" in only)]
        if not rels:
            return []
        rows = self.conn.execute(
            "SELECT c.oid, pg_relation_size(c.oid) / current_setting('block_size')::int, "
            "c.relispopulated FROM pg_class c WHERE c.oid = ANY(%s)",
            ([v.oid for v in rels],)).fetchall()
        facts = {int(oid): (int(blocks), bool(pop)) for oid, blocks, pop in rows}
        out = []
        for v in rels:
            if v.oid not in facts:
                continue  # dropped since the dictionary was read: nothing to copy
            blocks, populated = facts[v.oid]
            out.append(SourceTable(v, blocks, populated or v.relkind != RELKIND_MATVIEW))
        return sorted(out, key=lambda t: t.name)


@contextmanager
def export_snapshot(dsn: str, oids: Sequence[int], *, wait_seconds: float = 300.0,
                    poll_seconds: float = 1.0) -> Iterator[HeldSnapshot]:
    """Open the snapshot transaction (waiting for the install horizon) and hold it until the
    ``with`` block ends, with the tables ``oids`` locked against rewrites.

    As pg_dump does, the tables are locked ACCESS SHARE in the snapshot's transaction, so no
    VACUUM FULL, CLUSTER, TRUNCATE or rewriting ALTER TABLE moves their rows to other blocks
    while chunks are copied by block range (the copy would miss or repeat rows). A table
    rewritten between the snapshot and its lock is seen by its relfilenode having changed:
    the snapshot is then taken again."""
    import psycopg

    conn = _connect(dsn)
    try:
        horizon = _install_horizon(conn)
        deadline = time.monotonic() + wait_seconds
        while True:
            before = parse_lsn(conn.execute(
                "SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])
            conn.autocommit = False
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            # the first statement takes the snapshot; the LSN in it is read after
            sid, snap, after, started, block_size = conn.execute(
                "SELECT pg_export_snapshot(), pg_current_snapshot()::text, "
                "pg_current_wal_insert_lsn()::text, "
                "(extract(epoch FROM transaction_timestamp()) * 1000000)::int8, "
                "current_setting('block_size')::int").fetchone()
            xmin, xmax, xip = parse_pg_snapshot(snap)
            rewritten = _lock(conn, oids) if xmin >= horizon else []
            if xmin >= horizon and not rewritten:
                break
            conn.rollback()
            conn.autocommit = True
            if time.monotonic() >= deadline:
                raise SourceError(_older_than_install(conn, horizon, xip) if not rewritten
                                  else f"initial snapshot: {', '.join(rewritten)} kept being "
                                  "rewritten while the snapshot was taken")
            time.sleep(poll_seconds)
        dictionary = Dictionary()
        dictionary.apply_message(before, conn.execute(
            "SELECT cdclake.dictionary_json()::text").fetchone()[0])
        snapshot = SourceSnapshot(sid, before, parse_lsn(after), xmin, xmax, xip,
                                  int(started), horizon, int(block_size))
        yield HeldSnapshot(snapshot, dictionary, conn)
    except psycopg.Error as exc:
        raise SourceError(f"initial snapshot: {_first_line(exc)}") from exc
    finally:
        conn.close()


def _lock(conn: Any, oids: Sequence[int]) -> list[str]:
    """Lock the tables the snapshot sees (ACCESS SHARE); the ones rewritten since it was
    taken (relfilenode in the snapshot's catalog differs from the current one)."""
    rels = conn.execute(
        "SELECT format('%%I.%%I', n.nspname, c.relname), c.relkind, c.relispopulated "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = ANY(%s)", (list(oids),)).fetchall()
    tables = [name for name, kind, _ in rels if kind != RELKIND_MATVIEW]
    if tables:
        conn.execute(f"LOCK TABLE ONLY {', '.join(tables)} IN ACCESS SHARE MODE")
    for name, kind, populated in rels:
        if kind == RELKIND_MATVIEW and populated:
            # LOCK TABLE refuses views; any read takes the same lock, kept to the end
            conn.execute(f"SELECT FROM ONLY {name} LIMIT 0")
    return [r[0] for r in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c "
        "WHERE c.oid = ANY(%s) AND c.relfilenode <> pg_relation_filenode(c.oid)",
        (list(oids),)).fetchall()]


def _connect(dsn: str) -> Any:
    import psycopg

    try:
        return connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        raise SourceError(f"initial snapshot: cannot connect to the source: "
                          f"{_first_line(exc)}") from exc


def _install_horizon(conn: Any) -> int:
    found = conn.execute(
        "SELECT to_regprocedure('cdclake.install_horizon()') IS NOT NULL, "
        "to_regprocedure('cdclake.dictionary_json()') IS NOT NULL").fetchone()
    if not found[1]:
        raise SourceError("initial snapshot: cdclake is not installed in the source database: "
                          "run `cdclake source install` first")
    if not found[0]:
        raise SourceError("initial snapshot: the source's cdclake install predates initial "
                          "snapshots (no cdclake.install_horizon()): run `cdclake source "
                          "install` again")
    return int(conn.execute("SELECT cdclake.install_horizon()::text").fetchone()[0])


def _older_than_install(conn: Any, horizon: int, xip: tuple[int, ...]) -> str:
    old = sorted(x for x in xip if x < horizon)
    prepared = [f"{gid!r} (xid {xid})" for gid, xid in conn.execute(
        "SELECT gid, transaction::text FROM pg_prepared_xacts ORDER BY 1").fetchall()]
    what = f"transactions {', '.join(map(str, old))}" if old else "a transaction"
    extra = f"; prepared transactions: {', '.join(prepared)}" if prepared else ""
    return (f"initial snapshot: {what} began before `cdclake source install` (xid horizon "
            f"{horizon}) and are still open{extra}; the change stream cannot see their "
            "changes before the install, so the snapshot waits for them: end them (COMMIT, "
            "ROLLBACK, COMMIT/ROLLBACK PREPARED) and run again")


def parse_pg_snapshot(text: str) -> tuple[int, int, tuple[int, ...]]:
    """``pg_snapshot`` text (``xmin:xmax:xip,...``, 64-bit) -> (xmin, xmax, xip)."""
    try:
        xmin, xmax, xip = text.split(":")
        return int(xmin), int(xmax), tuple(int(x) for x in xip.split(",") if x)
    except ValueError as exc:
        raise SourceError(f"initial snapshot: not a pg_snapshot: {text!r}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def describe(snapshot: SourceSnapshot) -> str:
    return (f"snapshot {snapshot.id} at {format_lsn(snapshot.lsn)}..{format_lsn(snapshot.end_lsn)}"
            f" (xmin {snapshot.xmin}, xmax {snapshot.xmax}, {len(snapshot.xip)} running)")
