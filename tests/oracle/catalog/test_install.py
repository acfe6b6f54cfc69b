"""`cdclake source install` on a real server: idempotent, refuses what cannot be decoded."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cdclake.catalog.install import install, uninstall
from cdclake.cli import main
from cdclake.errors import SourceError
from cdclake.local.postgres import LocalPostgres

pytestmark = pytest.mark.oracle


def _emitted(pg: LocalPostgres, database: str, slot: str) -> list[dict]:
    rows = pg.sql("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)",
                  database, (slot,))
    prefix = "message: transactional: 1 prefix: cdclake.ddl, sz: "
    return [json.loads(r[0].split("content:", 1)[1]) for r in rows if r[0].startswith(prefix)]


def test_install_twice_is_idempotent_and_emits_a_full_dictionary(pg: LocalPostgres,
                                                                   database: str) -> None:
    pg.sql("CREATE TABLE acct (id int PRIMARY KEY, note text)", database)
    first = install(pg.dsn(database))
    pg.sql("SELECT pg_create_logical_replication_slot('inst', 'test_decoding')", database)
    try:
        second = install(pg.dsn(database))
        assert (second.db_oid, second.relations) == (first.db_oid, first.relations)
        assert second.dictionary_lsn > first.dictionary_lsn
        triggers = pg.sql("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'cdclake%%'",
                          database)[0][0]
        assert triggers > 0
        assert pg.sql("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'cdclake%%'",
                      database)[0][0] == triggers
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
