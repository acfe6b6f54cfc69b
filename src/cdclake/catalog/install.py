"""``cdclake source install``: prepare the source database so the WAL describes its own schema.

Installs the functions and triggers of ``sql/install/install.sql`` (event triggers for DDL,
TRUNCATE triggers on every followed table) and emits a full dictionary message, whose LSN is
where decoding can start without any other knowledge of the source. The source keeps where
that message lies (``cdclake.install_message()``), so a new stream's first batch knows which
archived segments come wholly before it before the message itself is archived. Refuses when
the server cannot produce what logical decoding needs.
"""

from __future__ import annotations

import argparse
import shlex
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from psycopg import sql

from cdclake.catalog.connection import connect
from cdclake.catalog.signing import fetch_key, key_path, read_key_file, write_key_file
from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError, redact
from cdclake.lsn import parse_lsn


@dataclass(frozen=True)
class InstallMessage:
    """Where an install's full dictionary message lies in the WAL: it starts at or after
    ``from_lsn`` (the WAL insert position read just before it was written; other sessions
    may write in between) and ends at ``end_lsn``."""

    from_lsn: int
    end_lsn: int


@dataclass(frozen=True)
class InstallReport:
    database: str
    db_oid: int
    server_version: int
    dictionary_lsn: int  #: end of the full-dictionary message
    relations: int  #: tables described by it
    key: bytes  #: the key that signs the source's cdclake.ddl messages (catalog.signing)


def _sql(name: str) -> str:
    return resources.files("cdclake.catalog").joinpath("sql", name).read_text()


def _connect(dsn: str):  # type: ignore[no-untyped-def]
    import psycopg

    try:
        return connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        raise SourceError(f"cannot connect to the source database ({redact(dsn)}): {exc}") from exc


def check_source(conn) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """Refuse unless wal_level is logical and we may create event triggers."""
    wal_level, version, superuser = conn.execute(
        "SELECT current_setting('wal_level'), current_setting('server_version_num')::int, "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)").fetchone()
    if wal_level != "logical":
        raise SourceError(
            f"wal_level is '{wal_level}' on the source; cdclake needs 'logical' (full new "
            "tuples and old keys in the WAL): ALTER SYSTEM SET wal_level = logical and restart")
    if version < 150000:
        raise SourceError(f"the source runs PostgreSQL {version}; cdclake reads 15 to 18")
    if not superuser:
        raise SourceError("source install creates event triggers, which needs a superuser")
    owner = conn.execute(
        "SELECT r.rolname, r.rolsuper FROM pg_catalog.pg_namespace n "
        "JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'cdclake'"
    ).fetchone()
    if owner is not None and not owner[1]:
        # its owner could replace the functions the event triggers run as a superuser
        raise SourceError(f"schema cdclake already exists in database {conn.info.dbname} and "
                          f"belongs to role {owner[0]}, who is not a superuser: drop it or "
                          "make a superuser its owner, then install again")
    return version, conn.info.dbname


#: attempts of an install that PostgreSQL aborts to break a deadlock
DEADLOCK_ATTEMPTS = 5


def install(dsn: str, known_key: bytes | None = None) -> InstallReport:
    """Install (or upgrade) and emit a full dictionary; one transaction. ``known_key`` is the
    decoders' copy of the signing key, used if the source lost its own.

    A first install locks every followed table, one after the other, to add its TRUNCATE
    trigger, while the application's transactions lock them in their own order: PostgreSQL
    may break a deadlock by aborting the install, which then starts again (nothing of it was
    committed). Any other failure of the server is a SourceError (one line)."""
    import psycopg

    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            return _install(dsn, known_key)
        except psycopg.errors.DeadlockDetected as exc:
            if attempt == DEADLOCK_ATTEMPTS:
                raise SourceError(f"source install: aborted {attempt} times by PostgreSQL to "
                                  f"break a deadlock with other sessions ({_first_line(exc)}); "
                                  "run it again when fewer transactions write") from exc
            time.sleep(0.5 * attempt)
        except psycopg.Error as exc:
            raise SourceError(f"source install failed ({redact(dsn)}): {_first_line(exc)}"
                              ) from exc
    raise AssertionError("unreachable")


def _install(dsn: str, known_key: bytes | None) -> InstallReport:
    with _connect(dsn) as conn:
        version, dbname = check_source(conn)
        with conn.transaction():
            conn.execute(_sql("install.sql"))
            key = _ensure_key(conn, known_key)
            before = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
            lsn, n, db_oid = conn.execute(
                "SELECT cdclake.emit(d)::text, jsonb_array_length(d->'relations'), "
                "(d->>'db_oid')::oid FROM cdclake.dictionary_json() d").fetchone()
            # a statement of its own: its snapshot is taken after the message was written
            conn.execute("SELECT cdclake.record_install_horizon()")
            conn.execute("SELECT cdclake.record_install_message(%s::pg_lsn, %s::pg_lsn)",
                         (before, lsn))
    return InstallReport(dbname, int(db_oid), version, parse_lsn(lsn), int(n), key)


def recorded_message(dsn: str) -> InstallMessage | None:
    """Where the last ``cdclake source install`` in the source database wrote its full
    dictionary, as it recorded it; None when that install predates the record."""
    import psycopg

    try:
        with connect(dsn) as conn:
            if not conn.execute("SELECT to_regprocedure('cdclake.install_message()') IS NOT NULL"
                                ).fetchone()[0]:
                return None
            first, end = conn.execute("SELECT from_lsn::text, end_lsn::text "
                                      "FROM cdclake.install_message()").fetchone()
    except psycopg.Error as exc:
        raise SourceError(f"cannot read where `cdclake source install` wrote its dictionary "
                          f"({redact(dsn)}): {_first_line(exc)}") from exc
    return InstallMessage(parse_lsn(first), parse_lsn(end))


def _first_line(exc: BaseException) -> str:
    return next(iter(str(exc).strip().splitlines()), type(exc).__name__)


def _ensure_key(conn, known: bytes | None) -> bytes:  # type: ignore[no-untyped-def]
    """The source's signing key, in the data directory's key file: the one a previous install
    wrote (so the messages already archived stay verifiable), else ``known`` (the decoders'
    copy, restoring a file lost with a data directory), else a new one made on the server.

    The key is in no statement, bind parameter or WAL record: it would be in the server log
    (``log_statement``), ``pg_stat_statements`` and ``pg_stat_activity``. A new key comes from
    ``cdclake.new_key()``; the decoders' copy travels as COPY data into a temporary table,
    which is not WAL-logged and gone at commit. The server writes the file through a shell
    with umask 077 (``COPY ... TO 'file'`` and ``lo_export`` make files anyone on the host may
    read), and tightens a file an earlier install left readable to others; the key comes back
    as the result of ``pg_read_file``."""
    path, present = conn.execute(
        "SELECT cdclake.key_path(), (pg_stat_file(cdclake.key_path(), true)).size IS NOT NULL"
    ).fetchone()
    quoted = shlex.quote(path)
    if present:
        _server_shell(conn, "SELECT WHERE false", f"chmod 600 {quoted}")
        return fetch_key(conn)
    key = "cdclake.new_key()"
    if known is not None:
        conn.execute("CREATE TEMPORARY TABLE cdclake_known_key (k bytea) ON COMMIT DROP")
        with conn.cursor().copy(
                "COPY pg_temp.cdclake_known_key FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["bytea"])
            copy.write_row([known])
        key = "(SELECT k FROM pg_temp.cdclake_known_key)"
    _server_shell(conn, f"SELECT cdclake.key_line({key})",
                  f"umask 077 && cat > {quoted}.new && mv {quoted}.new {quoted}")
    return fetch_key(conn)


def _server_shell(conn, query: str, command: str) -> None:  # type: ignore[no-untyped-def]
    """Run ``command`` in a shell on the server (as its user), ``query``'s rows its input."""
    conn.execute(sql.SQL("COPY ({}) TO PROGRAM {}").format(sql.SQL(query), sql.Literal(command)))


def uninstall(dsn: str) -> None:
    with _connect(dsn) as conn, conn.transaction():
        conn.execute(_sql("uninstall.sql"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("install", "uninstall"))
    p.add_argument("--dsn", help="source database (default CDCLAKE_SOURCE_DSN)")
    p.add_argument("--key-file", type=Path,
                   help="where to keep the key that signs the schema messages (default "
                        "CDCLAKE_DDL_KEY_FILE, else ddl.key in CDCLAKE_HOME)")


def run(args: argparse.Namespace, config: Config) -> int:
    dsn = args.dsn or config.source_dsn
    if not dsn:
        raise ConfigError("give --dsn or set CDCLAKE_SOURCE_DSN")
    if args.action == "uninstall":
        uninstall(dsn)
        print("cdclake removed from the source (messages already in the WAL stay there)")
        return 0
    path = args.key_file or key_path(config)
    r = install(dsn, read_key_file(path) if path.exists() else None)
    written = write_key_file(path, r.key)
    lsn = f"{r.dictionary_lsn >> 32:X}/{r.dictionary_lsn & 0xFFFFFFFF:X}"
    print(f"cdclake installed in database {r.database} (oid {r.db_oid}, PostgreSQL "
          f"{r.server_version // 10000}); full dictionary of {r.relations} tables written to "
          f"the WAL at {lsn}: decode from WAL that includes it")
    print(f"the key that signs its schema messages is {'in' if written else 'still in'} "
          f"{path} (mode 0600): decoders need it (CDCLAKE_DDL_KEY_FILE)")
    return 0
