"""A database owner who is not a superuser attacks cdclake, and gains nothing.

Mallory owns the source database, as an application's role often does. So she may create
objects in its public schema (owned by pg_database_owner), create schemas — one named after a
role is that role's ``"$user"`` on the default search path — and temporary objects, set the
database's defaults, and call ``pg_logical_emit_message``. cdclake's triggers run as the
superuser who installed them whenever her DDL fires them, and that superuser installs again
now and then.

She plants a shadow of every call cdclake's installed functions make, with the call's exact
argument types (tests/oracle/catalog/shadows.py reads them from the parse trees the server
logs while a probe runs every function and every kind of DDL), and a view named after each
catalog relation they read: in public, in her own schema, in a schema named after the
installing superuser, and in pg_temp. Each records that it ran (a non-transactional message,
which outlives an aborted DDL) and tries to make her a superuser. Then she puts her schemas
before pg_catalog in her session's search path and in the database's default (which the
superuser's re-install would take), tries to create in, replace, alter and call what cdclake
installed, writes forged ``cdclake.ddl`` messages, runs every kind of DDL the triggers react
to in her hostile session, and the decoding oracle's DDL workloads in plain ones.

Afterwards she is no superuser and has no new attribute; no planted object ran as anyone but
herself (one did run, in a query of her own: the shadows are live); ``cdclake decode`` equals
the test_decoding slot line for line (type names and messages included: the forgeries changed
nothing); through ship, Spark decode and merge, every mirror equals its source table — the
tables whose TRUNCATE triggers she dropped or disabled before truncating them too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cdclake.catalog.install import install
from cdclake.local.postgres import LocalPostgres
from tests.oracle.catalog import shadows
from tests.oracle.decoding.harness import Capture, as_lines, diff, ours
from tests.oracle.decoding.test_forged_messages import connect_as, forgeries
from tests.oracle.decoding.workloads import OWNER, owner_truncates, workloads
from tests.oracle.pipeline.harness import run_action
from tests.oracle.pipeline.test_pipeline_oracle import check

pytestmark = pytest.mark.oracle

#: the decoding oracle's workloads with every kind of DDL a table owner has
WORKLOADS = ("type_ddl", "alter_table", "partitions", "replica_identities", "truncate",
             "vacuum_full_cluster", "other_database_ignored_and_sequences")
#: what a table owner may do to the TRUNCATE triggers, then TRUNCATE every way (the decoding
#: oracle's ``owner_truncates`` but its superuser's checkpoint), in a schema of its own: the
#: workloads above have a ``bystander`` too
OWNED = ((OWNER, "CREATE SCHEMA owned"), (OWNER, "SET search_path = owned"),
         *((session, sql) for session, sql in owner_truncates() if session == OWNER))

#: DDL taking every path of the triggers (run by the probe, then by Mallory in her hostile
#: session); nothing in it calls a function or an operator itself
DDL = (
    "CREATE SCHEMA probe_s",
    "CREATE TYPE probe_s.mood AS ENUM ('a', 'b')",
    "CREATE DOMAIN probe_s.dom AS int",
    "CREATE TYPE probe_s.pair AS (x int, y text)",
    "CREATE TABLE probe_s.t (id int PRIMARY KEY, m probe_s.mood, d probe_s.dom, v text)",
    "CREATE TABLE probe_s.typed OF probe_s.pair (PRIMARY KEY (x))",
    "INSERT INTO probe_s.t VALUES (1, 'a', 1, 'one'), (2, 'b', 2, 'two')",
    "ALTER TYPE probe_s.mood ADD VALUE 'c'",
    "ALTER TYPE probe_s.pair ADD ATTRIBUTE z int CASCADE",
    "ALTER TABLE probe_s.t ADD COLUMN w int DEFAULT 7",
    "ALTER TABLE probe_s.t ALTER COLUMN w TYPE bigint",
    "ALTER TABLE probe_s.t DROP COLUMN w",
    "ALTER TABLE probe_s.t ALTER COLUMN v SET NOT NULL",
    "CREATE UNIQUE INDEX t_v ON probe_s.t (v)",
    "ALTER TABLE probe_s.t REPLICA IDENTITY USING INDEX t_v",
    "DROP INDEX probe_s.t_v",
    "ALTER TABLE probe_s.t REPLICA IDENTITY FULL",
    "CREATE TABLE probe_s.p (id int, k int) PARTITION BY RANGE (k)",
    "CREATE TABLE probe_s.p1 PARTITION OF probe_s.p FOR VALUES FROM (0) TO (10)",
    "INSERT INTO probe_s.p VALUES (1, 1)",
    "TRUNCATE probe_s.t, probe_s.p1",
    "INSERT INTO probe_s.t VALUES (3, 'c', 3, 'three')",
    "CREATE MATERIALIZED VIEW probe_s.mv AS SELECT id FROM probe_s.t",
    "REFRESH MATERIALIZED VIEW probe_s.mv",
    "ALTER TABLE probe_s.t RENAME TO t2",
    "ALTER SCHEMA probe_s RENAME TO probe_r",
    "DROP TYPE probe_r.mood CASCADE",
    "DROP DOMAIN probe_r.dom CASCADE",
    "DROP TABLE probe_r.p",
    "DROP SCHEMA probe_r CASCADE",
)

#: what the probe passes cdclake's functions for each argument type (constants: the probe's
#: own statements call nothing but the function)
ARGUMENTS = {
    "oid": "'probe_base'::regclass::oid",
    "oid[]": "ARRAY['probe_base'::regclass::oid]",
    "jsonb": """'{"kind": "relations", "relations": [], "types": [], "changed_types": []}'"""
             "::jsonb",
    "bytea": "'\\x" + "00" * 64 + "'::bytea",
    "pg_lsn": "'0/0'::pg_lsn",
}

#: what Mallory tries that PostgreSQL must refuse her ({role}: her name)
DENIED = (
    "CREATE FUNCTION cdclake.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE OR REPLACE FUNCTION cdclake.relation_json(rel oid) RETURNS jsonb "
    "LANGUAGE sql AS 'SELECT NULL::jsonb'",
    "ALTER FUNCTION cdclake.on_ddl() SECURITY INVOKER",
    "ALTER FUNCTION cdclake.emit(jsonb) OWNER TO {role}",
    "ALTER SCHEMA cdclake RENAME TO cdclake_old",
    "DROP SCHEMA cdclake CASCADE",
    "ALTER EVENT TRIGGER cdclake_ddl DISABLE",
    "DROP EVENT TRIGGER cdclake_drop",
    "SELECT cdclake.emit('{{}}')",
    "SELECT cdclake.record_install_horizon()",
    "SELECT cdclake.record_install_message('0/0', '0/0')",
    "SELECT cdclake.add_truncate_trigger('acct'::regclass)",
    "SELECT pg_catalog.pg_read_file('cdclake_ddl.key')",
    "SET session_replication_role = replica",
)


def probe(pg: LocalPostgres, database: str) -> tuple[set[shadows.Call], set[tuple[str, str]]]:
    """The calls and catalog relations of cdclake's installed functions: each called once
    directly, the triggers fired by :data:`DDL` (in a database of its own). Checks that every
    function and operator their source names was seen called."""
    db = pg.create_database(f"{database}_probe")
    pg.sql("CREATE TABLE probe_base (id int PRIMARY KEY, v text)", db)
    install(pg.dsn(db))
    with pg.connect(db) as conn:
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proargtypes::regtype[]::text[] "
            "FROM pg_proc p WHERE p.pronamespace = 'cdclake'::regnamespace "
            "AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)").fetchall()
        calls = [f"SELECT {name.split('(')[0]}({', '.join(ARGUMENTS[t] for t in types)})"
                 for name, types in functions]
        sites, rels = shadows.probe(conn, [*calls, *DDL])
        source = " ".join(r[0] for r in conn.execute(
            "SELECT prosrc FROM pg_proc WHERE pronamespace = 'cdclake'::regnamespace"))
        named = set(re.findall(r"pg_catalog\.(\w+)\s*\(", source)) | set(
            re.findall(r"OPERATOR\(pg_catalog\.([^)\s]+)\)", source))
    pg.sql(f'DROP DATABASE "{db}"')
    seen = {c.name for c in sites}
    assert named <= seen, f"the probe never saw these called: {sorted(named - seen)}"
    return sites, rels


def _attempt(conn: psycopg.Connection, statement: str) -> str | None:
    """None if PostgreSQL refused ``statement`` for want of a privilege, else what happened
    (then undone, so that the rest of the attack meets the install as it was)."""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return None
    except psycopg.Error as exc:
        return f"{statement}: {exc.diag.message_primary}"
    return f"{statement}: allowed"


def attack(pg: LocalPostgres, database: str, role: str, sites: set[shadows.Call],
           rels: set[tuple[str, str]]) -> dict[str, Any]:
    """Everything but the workloads, in one session of Mallory's: what PostgreSQL let her do
    of :data:`DENIED`, and how the superuser's re-install went."""
    found: dict[str, Any] = {}
    with connect_as(pg, database, role) as evil:
        evil.execute(f"CREATE SCHEMA {role}")  # her "$user"
        evil.execute("CREATE SCHEMA postgres")  # the installing superuser's "$user"
        for schema in ("public", role, "postgres", "pg_temp"):
            for shadow in shadows.shadows(sites, rels, schema, role):
                for ddl in shadow.ddl:
                    evil.execute(ddl)
        hostile = f"{role}, public, postgres, pg_catalog, pg_temp"
        evil.execute(f"SET search_path = {hostile}")
        evil.execute("SELECT unnest('{1}'::oid[])")  # her own query takes her shadow
        evil.execute("CREATE TABLE acct (id int PRIMARY KEY, note text)")
        found["allowed"] = [r for r in (_attempt(evil, s.format(role=role)) for s in DENIED)
                            if r]
        # the database's default path, which the superuser's next session takes
        evil.execute(f'ALTER DATABASE "{database}" SET search_path = {hostile}')
        try:
            install(pg.dsn(database))
        except Exception as exc:  # reported after the privileges
            found["reinstall"] = repr(exc)
        evil.execute(f'ALTER DATABASE "{database}" RESET search_path')
        # forged schema messages, and a genuine one replayed (as test_forged_messages)
        real = json.loads(pg.sql("SELECT cdclake.relations_json(ARRAY[%s::regclass])::text",
                                 database, (f"{role}.acct",))[0][0])
        genuine = [r[0].split("content:", 1)[1] for r in pg.sql(
            "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)", database,
            (f"pipe_{database}",)) if "prefix: cdclake.ddl" in r[0]]
        for transactional in (True, False):
            for p in [*forgeries(real), genuine[-1].encode()]:
                evil.execute("SELECT pg_catalog.pg_logical_emit_message(%s, 'cdclake.ddl', "
                             "%s::bytea)", (transactional, p))
        evil.execute("INSERT INTO acct VALUES (1, 'after the forgeries')")
        for ddl in DDL:
            evil.execute(ddl)
        evil.execute("UPDATE acct SET note = 'still text' WHERE id = 1")
    return found


def run_as(pg: LocalPostgres, database: str, role: str,
           steps: list[tuple[str, str]]) -> None:
    """``steps`` (session, SQL) in sessions of ``role``'s, as the oracles' harnesses run them."""
    sessions: dict[str, psycopg.Connection] = {}
    try:
        for session, sql in steps:
            if session not in sessions:
                sessions[session] = connect_as(pg, database, role)
            sessions[session].execute(sql)
    finally:
        for conn in sessions.values():
            conn.close()


def gained_nothing(pg: LocalPostgres, database: str, role: str, found: dict[str, Any]) -> None:
    """She has no attribute or membership she lacked, no planted object ran but in her own
    queries, PostgreSQL refused her everything in :data:`DENIED`, the attack went through."""
    attributes = pg.sql(
        "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, "
        "(SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid) "
        "FROM pg_roles r WHERE rolname = %s", params=(role,))
    assert attributes == [(False, False, False, False, False, 0)], "Mallory gained a privilege"
    ran = [r[0].split("content:", 1)[1] for r in pg.sql(
        "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)", database,
        (f"pipe_{database}",)) if f"prefix: {shadows.RAN}" in r[0]]
    assert [r for r in ran if not r.endswith(f" as {role}")] == [], "planted objects ran"
    assert f"{role}.unnest(oid[]) as {role}" in ran, "the shadows never run: the test is void"
    assert found.get("allowed") == [], "PostgreSQL let her"
    assert "reinstall" not in found and "failed" not in found, found


def test_a_database_owner_gains_nothing(pg: LocalPostgres, database: str, tmp_path: Path,
                                        spark: Any) -> None:
    role = f"mallory_{database}"
    sites, rels = probe(pg, database)
    pg.sql(f"CREATE ROLE {role} LOGIN")
    pg.sql(f'ALTER DATABASE "{database}" OWNER TO {role}')
    work = {w.name: w for w in workloads(pg.version)}
    steps = [("a", sql) for name in WORKLOADS for sql in work[name].setup] + [
        step for name in WORKLOADS for step in work[name].steps] + list(OWNED)

    def act() -> None:
        found: dict[str, Any] = {}
        try:
            found.update(attack(pg, database, role, sites, rels))
            run_as(pg, database, role, steps)
        except Exception as exc:  # reported after the privileges
            found["failed"] = repr(exc)
        gained_nothing(pg, database, role, found)  # before the pipeline reads the WAL

    try:
        run = run_action(pg, database, act, spark, tmp_path)
    finally:
        pg.sql(f'ALTER DATABASE "{database}" OWNER TO postgres')
        pg.sql(f"DROP OWNED BY {role}", database)
        pg.sql(f"DROP ROLE {role}")
    expected = as_lines(run.slot_lines)
    db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = %s", params=(database,))[0][0]
    actual, _ = ours(pg, Capture(database, db_oid, run.read_from, run.slot, run.start_lsn,
                                 run.key, run.end_lsn), spill_dir=tmp_path / "decode")
    assert actual == expected, diff(expected, actual)
    check(pg, run)
