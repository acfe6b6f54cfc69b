"""`cdclake source install` on a real server: idempotent, refuses what cannot be decoded."""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cdclake.catalog.capture import capture, database_oid
from cdclake.catalog.connection import connect
from cdclake.catalog.export import export_snapshot, followed_tables
from cdclake.catalog.install import InstallReport, install, uninstall
from cdclake.catalog.signing import load_key, pads
from cdclake.cli import main
from cdclake.config import Config
from cdclake.errors import SourceError
from cdclake.local.postgres import LocalPostgres
from cdclake.pipeline.status import status
from tests.support import VERSIONS

pytestmark = pytest.mark.oracle


def _emitted(pg: LocalPostgres, database: str, slot: str) -> list[dict]:
    rows = pg.sql("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)",
                  database, (slot,))
    prefix = "message: transactional: 1 prefix: cdclake.ddl, sz: "
    # content: the signature line, then the JSON (cdclake.catalog.signing)
    return [json.loads(r[0].split("content:", 1)[1].split("\n", 1)[1]) for r in rows
            if r[0].startswith(prefix)]


def test_install_twice_is_idempotent_and_emits_a_full_dictionary(pg: LocalPostgres,
                                                                   database: str) -> None:
    pg.sql("CREATE TABLE acct (id int PRIMARY KEY, note text)", database)
    triggers = ("SELECT evtname FROM pg_event_trigger WHERE evtname LIKE 'cdclake%%' "
                "ORDER BY evtname")
    first = install(pg.dsn(database))
    after_first = [r[0] for r in pg.sql(triggers, database)]
    pg.sql("SELECT pg_create_logical_replication_slot('inst', 'test_decoding')", database)
    try:
        second = install(pg.dsn(database))
        assert (second.db_oid, second.relations) == (first.db_oid, first.relations)
        assert second.key == first.key  # messages already archived stay verifiable
        # the key is in no change a slot sees (a table's rows would be)
        slot = pg.sql("SELECT data FROM pg_logical_slot_peek_changes('inst', NULL, NULL)",
                      database)
        assert slot and not any(first.key.hex() in r[0] for r in slot)
        assert second.dictionary_lsn > first.dictionary_lsn
        # the second install replaced the triggers, it did not add a second set
        assert after_first == ["cdclake_ddl", "cdclake_drop"]
        assert [r[0] for r in pg.sql(triggers, database)] == after_first
        messages = _emitted(pg, database, "inst")
        dictionaries = [m for m in messages if m.get("kind") == "dictionary"]
        assert len(dictionaries) == 1, messages
        names = {(r["schema"], r["name"]) for r in dictionaries[0]["relations"]}
        assert ("public", "acct") in names
        # DDL after the install is described in the WAL by the event trigger
        pg.sql("ALTER TABLE acct ADD COLUMN extra int", database)
        ddl = [m for m in _emitted(pg, database, "inst") if m.get("kind") == "relations"]
        cols = [c["name"] for r in ddl[0]["relations"] if r["name"] == "acct"
                for c in r["columns"]]
        assert "extra" in cols
    finally:
        pg.sql("SELECT pg_drop_replication_slot('inst')", database)
    uninstall(pg.dsn(database))
    assert pg.sql("SELECT count(*) FROM pg_namespace WHERE nspname = 'cdclake'",
                  database)[0][0] == 0


def test_a_lost_key_file_is_restored_from_the_decoders_copy(pg: LocalPostgres,
                                                           database: str) -> None:
    first = install(pg.dsn(database))
    path = pg.sql("SELECT cdclake.key_path()", database)[0][0]
    assert path.startswith(str(pg.data_dir))
    Path(path).unlink()  # a data directory restored without it
    with pytest.raises(psycopg.errors.RaiseException, match=r"cdclake_ddl\.key is missing"):
        pg.sql("CREATE TABLE t_without_key (id int)", database)  # DDL is not left undescribed
    assert install(pg.dsn(database), first.key).key == first.key
    pg.sql("CREATE TABLE t_with_key (id int)", database)
    Path(path).unlink()
    assert install(pg.dsn(database)).key != first.key  # nothing known: a new key


def test_every_installed_function_pins_its_search_path(pg: LocalPostgres,
                                                       database: str) -> None:
    """The triggers run them as the installing superuser in anyone's session: each looks
    names up in pg_catalog alone (tests/oracle/pipeline/test_hostile_role.py plants a shadow
    of every call). ``type_name`` prints type names as a decoding session would, under its
    path, and calls nothing but pg_catalog.format_type."""
    install(pg.dsn(database))
    rows = pg.sql("SELECT proname, proconfig, prosrc FROM pg_proc "
                  "WHERE pronamespace = 'cdclake'::regnamespace", database)
    paths = {name: config for name, config, _ in rows}
    assert paths.pop("type_name", None) == ['search_path="$user", public, pg_temp']
    assert {name: c for name, c in paths.items()
            if c != ["search_path=pg_catalog, pg_temp"]} == {}
    (body,) = [src for name, _, src in rows if name == "type_name"]
    assert re.findall(r"[\w.]+\s*\(", body) == ["pg_catalog.format_type("]


#: functions cdclake's sessions call by name, planted in public (which the database's default
#: search path puts first) to fail whoever calls them
PLANTED = {"pg_current_wal_lsn()": "pg_lsn", "pg_current_wal_insert_lsn()": "pg_lsn",
           "current_setting(text)": "text", "to_regprocedure(text)": "regprocedure",
           "pg_read_file(text)": "text", "pg_relation_size(regclass)": "bigint",
           "pg_export_snapshot()": "text"}


def test_no_session_of_cdclake_takes_the_databases_search_path(pg: LocalPostgres, database: str,
                                                               tmp_path: Path) -> None:
    """The owner of a database may set its default search path and plant functions in a
    schema on it; a superuser session that took that path would run them. Every session
    cdclake opens on the source (catalog.connection) looks names up in pg_catalog, and keeps
    the options its DSN gives."""
    key = install(pg.dsn(database)).key
    pg.sql("CREATE TABLE shop (id int PRIMARY KEY)", database)
    oid = pg.sql("SELECT 'shop'::regclass::oid", database)[0][0]
    for fn, result in PLANTED.items():
        pg.sql(f"CREATE FUNCTION public.{fn} RETURNS {result} LANGUAGE plpgsql "
               "AS $$BEGIN RAISE EXCEPTION 'a planted function ran'; END$$", database)
    pg.sql(f'ALTER DATABASE "{database}" SET search_path = public, pg_catalog')
    dsn = pg.dsn(database) + " options='-c statement_timeout=120s'"
    try:
        with pytest.raises(psycopg.errors.RaiseException, match="planted"):
            pg.sql("SELECT pg_current_wal_lsn()", database)  # a session that took the path
        with connect(dsn) as conn:
            assert conn.execute("SELECT current_setting('search_path'), "
                                "current_setting('statement_timeout')").fetchone() == (
                "pg_catalog,pg_temp", "2min")
        install(dsn, key)
        assert capture(dsn)[0] > 0 and database_oid(dsn) > 0
        assert load_key(Config(home=tmp_path), dsn) == key
        assert [t.name for t in followed_tables(dsn)] == ["public.shop"]
        with export_snapshot(dsn, [oid]) as held:
            assert [t.name for t in held.tables()] == ["public.shop"]
        source = status(Config(home=tmp_path, source_dsn=dsn))["source"]
        assert "error" not in source, source
    finally:
        pg.sql(f'ALTER DATABASE "{database}" RESET search_path')


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def logged(request: pytest.FixtureRequest) -> Iterator[LocalPostgres]:
    """A cluster that keeps every statement: in its log, and in pg_stat_statements (nested
    ones too)."""
    cluster = LocalPostgres.create(request.param, settings={
        "log_statement": "all", "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "all"}).start()
    cluster.sql("CREATE EXTENSION pg_stat_statements")
    yield cluster
    cluster.destroy()


def test_the_key_is_made_on_the_server_and_sent_in_no_statement(logged: LocalPostgres) -> None:
    """A fresh install, a restore from the decoders' copy, a re-install over a file an earlier
    install left readable: the key (or its pads) is in no statement the server logged or
    counted, nor in its WAL, and its file is the server user's alone."""
    pg = logged
    database = pg.create_database("keyed")
    first = install(pg.dsn(database))
    path = Path(pg.sql("SELECT cdclake.key_path()", database)[0][0])
    modes = [stat.S_IMODE(path.stat().st_mode)]
    path.unlink()  # a data directory restored without it
    assert install(pg.dsn(database), first.key).key == first.key
    modes.append(stat.S_IMODE(path.stat().st_mode))
    path.chmod(0o644)  # as COPY ... TO 'file' wrote it before
    assert install(pg.dsn(database)).key == first.key
    modes.append(stat.S_IMODE(path.stat().st_mode))
    secrets = [b.hex() for b in (first.key, *pads(first.key))]
    seen = {"log": pg.log_file.read_text(errors="replace"),
            "pg_stat_statements": "\n".join(r[0] for r in pg.sql(
                "SELECT query FROM pg_stat_statements")),
            "pg_stat_activity": "\n".join(r[0] or "" for r in pg.sql(
                "SELECT query FROM pg_stat_activity"))}
    assert "cdclake_ddl.key" in seen["log"] and "COPY" in seen["pg_stat_statements"]
    assert [where for where, text in seen.items() for s in secrets if s in text] == []
    wal = b"".join(f.read_bytes() for f in sorted(pg.wal_dir.iterdir()) if f.is_file())
    assert first.key not in wal and secrets[0].encode() not in wal
    assert modes == [0o600, 0o600, 0o600]


@pytest.fixture(scope="module")
def replica_level() -> Iterator[LocalPostgres]:
    cluster = LocalPostgres.create(15, settings={"wal_level": "replica"}).start()
    yield cluster
    cluster.destroy()


def test_install_refuses_wal_level_replica(replica_level: LocalPostgres,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SourceError, match=r"wal_level is 'replica'.*needs 'logical'"):
        install(replica_level.dsn())
    assert main(["source", "install", "--dsn", replica_level.dsn()]) == 2
    assert "wal_level is 'replica'" in capsys.readouterr().err
    assert replica_level.sql("SELECT count(*) FROM pg_namespace WHERE nspname = 'cdclake'")[0][0] \
        == 0


def _ddl_messages(pg: LocalPostgres, database: str, slot: str, sql: str) -> list[dict]:
    pg.sql(sql, database)
    return [m for m in _emitted(pg, database, slot) if m.get("kind") == "relations"]


def test_type_level_ddl_writes_the_changed_types(pg: LocalPostgres, database: str) -> None:
    """ALTER TYPE/DOMAIN change no relation: the event trigger names the types they changed
    (with their array types, whose names follow) so the decoder takes those facts as news."""
    pg.sql("""CREATE TYPE mood AS ENUM ('sad', 'happy');
              CREATE DOMAIN mood_dom AS mood;
              CREATE TYPE pair AS (a int, b text);
              CREATE TABLE moods (id int PRIMARY KEY, m mood, p pair);
              CREATE TABLE pairs OF pair;""", database)
    install(pg.dsn(database))
    oid = {n: pg.sql("SELECT %s::regtype::oid::int8", database, (n,))[0][0]
           for n in ("mood", "mood[]", "mood_dom", "pair", "pair[]", "text")}
    pg.sql("SELECT pg_create_logical_replication_slot('types', 'test_decoding')", database)
    try:
        (m,) = _ddl_messages(pg, database, "types", "ALTER TYPE mood ADD VALUE 'ok' BEFORE 'happy'")
        assert m["relations"] == []
        assert set(m["changed_types"]) == {oid["mood"], oid["mood[]"]}
        (mood,) = [t for t in m["types"] if t["oid"] == oid["mood"]]
        assert sorted(mood["enum_labels"].values()) == ["happy", "ok", "sad"]

        (m,) = _ddl_messages(pg, database, "types", "ALTER TYPE mood RENAME TO feeling")
        names = {t["oid"]: t["name"] for t in m["types"]}
        assert (names[oid["mood"]], names[oid["mood[]"]]) == ("feeling", "feeling[]")

        (m,) = _ddl_messages(pg, database, "types", "ALTER DOMAIN mood_dom SET DEFAULT 'ok'")
        assert oid["mood_dom"] in m["changed_types"]

        # a composite's attributes: reported as its pg_class row; the typed table follows
        (m,) = _ddl_messages(pg, database, "types",
                             "ALTER TYPE pair ADD ATTRIBUTE c bigint CASCADE")
        assert oid["pair"] in m["changed_types"]
        assert [r["name"] for r in m["relations"]] == ["pairs"]
        assert [c["name"] for c in m["relations"][0]["columns"]] == ["a", "b", "c"]
        (pair,) = [t for t in m["types"] if t["oid"] == oid["pair"]]
        assert [(a["name"], a["type_oid"]) for a in pair["attributes"]] == [
            ("a", 23), ("b", oid["text"]), ("c", 20)]
        assert {20, 23, oid["text"]} <= {t["oid"] for t in m["types"]}, "attribute types"

        # plain relation DDL names no type as changed: its column types are only references
        (m,) = _ddl_messages(pg, database, "types", "ALTER TABLE moods ADD COLUMN n int")
        assert m["changed_types"] == []
        assert oid["mood"] in {t["oid"] for t in m["types"]}
    finally:
        pg.sql("SELECT pg_drop_replication_slot('types')", database)


def test_install_refuses_a_cdclake_schema_owned_by_another_role(pg: LocalPostgres,
                                                                 database: str) -> None:
    """Its owner could replace the functions the event triggers run as a superuser."""
    role = f"mallory_{database}"
    pg.sql(f"CREATE ROLE {role} LOGIN")
    pg.sql(f"CREATE SCHEMA cdclake AUTHORIZATION {role}", database)
    try:
        with pytest.raises(SourceError, match=f"schema cdclake already exists in database "
                                              f"{database} and belongs to role {role}"):
            install(pg.dsn(database))
        assert pg.sql("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'cdclake%%'",
                      database)[0][0] == 0
    finally:
        pg.sql("DROP SCHEMA cdclake CASCADE", database)
        pg.sql(f"DROP ROLE {role}")


def test_a_temporary_table_cannot_shadow_a_catalog(pg: LocalPostgres, database: str) -> None:
    """A role's temporary ``pg_class`` is not what the SECURITY DEFINER trigger functions
    read: pg_temp comes last in their search path. The role's DDL is described correctly."""
    role = f"eve_{database}"
    pg.sql(f"CREATE ROLE {role} LOGIN")
    pg.sql(f"GRANT CREATE ON SCHEMA public TO {role}", database)
    install(pg.dsn(database))
    pg.sql("SELECT pg_create_logical_replication_slot('shadow', 'test_decoding')", database)
    try:
        dsn = pg.dsn(database).replace("user=postgres", f"user={role}")
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TEMP TABLE pg_class (oid oid, relname text)")
            conn.execute("INSERT INTO pg_class VALUES (1, 'forged')")
            conn.execute("CREATE TABLE public.shadowed (id int PRIMARY KEY, v text)")
        described = [r for m in _emitted(pg, database, "shadow") if m.get("kind") == "relations"
                     for r in m["relations"]]
        assert [(r["name"], [c["name"] for c in r["columns"]]) for r in described] == [
            ("shadowed", ["id", "v"])]
    finally:
        pg.sql("SELECT pg_drop_replication_slot('shadow')", database)
        pg.sql("DROP TABLE IF EXISTS public.shadowed", database)
        pg.sql(f"REVOKE CREATE ON SCHEMA public FROM {role}", database)
        pg.sql(f"DROP ROLE {role}")


def test_a_first_install_aborted_by_a_deadlock_starts_again(pg: LocalPostgres,
                                                            database: str) -> None:
    """A first install locks the followed tables one after the other to add their TRUNCATE
    triggers; a writer holding the later one that then writes the earlier one closes a cycle.
    PostgreSQL breaks it by aborting the install (whose wait began first): the install starts
    again, waits for the writer's commit, and succeeds — with writers running, as on any
    database that is in use."""
    for name in ("a", "b"):
        pg.sql(f"CREATE TABLE {name} (id int PRIMARY KEY)", database)
    # the install's deadlock check runs once, this long after its wait began: by then the
    # writer waits too, and never checks first
    pg.sql(f'ALTER DATABASE "{database}" SET deadlock_timeout = \'5s\'')
    # the order the install's scan of pg_class adds the triggers in
    first, second = (r[0] for r in pg.sql(
        "SELECT relname FROM pg_class WHERE relname IN ('a', 'b') ORDER BY ctid", database))
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["report"] = install(pg.dsn(database))
        except Exception as exc:  # reported below
            outcome["error"] = exc

    with pg.connect(database, autocommit=False) as writer:
        writer.execute("SET deadlock_timeout = '1min'")
        writer.execute(f"INSERT INTO {second} VALUES (1)")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not pg.sql("SELECT 1 FROM pg_locks WHERE relation = %s::regclass AND NOT granted "
                         "AND mode = 'ShareRowExclusiveLock'", database, (second,)):
            assert time.monotonic() < deadline and thread.is_alive(), outcome
            time.sleep(0.02)
        writer.execute(f"INSERT INTO {first} VALUES (1)")  # the cycle: the install is aborted
        writer.commit()
    thread.join(60)
    assert "error" not in outcome, repr(outcome["error"])
    assert isinstance(outcome["report"], InstallReport)
    assert sorted(r[0] for r in pg.sql(
        "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'cdclake_truncate'",
        database)) == ["a", "b"]
