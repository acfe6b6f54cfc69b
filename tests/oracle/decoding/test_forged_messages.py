"""A role that is not a superuser cannot change the dictionary with a ``cdclake.ddl`` message.

Any role may call ``pg_logical_emit_message``. Mallory, a plain login role, writes payloads
built from the real ones (a column retyped, the table "dropped", an invented relation on the
table's relfilenode), unsigned, signed with another key, and a genuine signed message copied
verbatim into her own transaction; transactional and not. She also tries to sign through
``cdclake.emit`` and to switch the triggers off with the GUC they once used as a recursion
guard. If the decoder believed any forgery, the rows of ``acct`` written after it would
decode differently from the slot (text read as an integer, the table gone or renamed).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import psycopg
import pytest

from cdclake.catalog.signing import new_key, sign
from cdclake.local.postgres import LocalPostgres
from tests.oracle.decoding.harness import (
    archive_all,
    as_lines,
    diff,
    oracle,
    ours,
    prepare,
    run_steps,
)

pytestmark = pytest.mark.oracle


def setup(role: str) -> list[str]:
    """acct, and a role that may write it (one per database: roles are the cluster's)."""
    return ["CREATE TABLE acct (id int PRIMARY KEY, note text)",
            "INSERT INTO acct VALUES (1, 'before')",
            f"CREATE ROLE {role} LOGIN",
            f"GRANT CREATE ON SCHEMA public TO {role}",
            f"GRANT SELECT, INSERT, UPDATE ON acct TO {role}"]


def connect_as(pg: LocalPostgres, database: str, role: str) -> psycopg.Connection:
    return psycopg.connect(pg.dsn(database).replace("user=postgres", f"user={role}"),
                           autocommit=True)


def forgeries(real: dict) -> list[bytes]:
    """Payloads a forger builds from a genuine ``relations`` message describing acct."""
    acct = next(r for r in real["relations"] if r["name"] == "acct")
    retyped = json.loads(json.dumps(real))
    for c in next(r for r in retyped["relations"] if r["name"] == "acct")["columns"]:
        if c["name"] == "note":
            c.update(type_oid=23, attlen=4, attbyval=True, attalign="i")
    invented = json.loads(json.dumps(real))
    fake = next(r for r in invented["relations"] if r["name"] == "acct")
    fake.update(oid=acct["oid"] + 100000, name="stolen", qualified="public.stolen")
    drop = {"kind": "drop", "relations": [{"oid": acct["oid"]}]}
    bodies = [json.dumps(p).encode() for p in (retyped, drop, invented)]
    other_key = new_key()
    # unsigned (what an install before signing wrote), and signed with a key of Mallory's own
    return bodies + [sign(other_key, 1, b) for b in bodies]


def test_forged_schema_messages_change_nothing(pg: LocalPostgres, database: str,
                                               tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    mallory = f"mallory_{database}"
    cap = prepare(pg, database, setup(mallory))
    try:
        # a genuine message: the event trigger describes acct (signed for this transaction)
        pg.sql("ALTER TABLE acct ADD COLUMN extra int", database)
        rows = pg.sql("SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL)",
                      database, (cap.slot,))
        genuine = [r[0].split("content:", 1)[1] for r in rows
                   if r[0].startswith("message: transactional: 1 prefix: cdclake.ddl")]
        assert len(genuine) == 1 and genuine[0].startswith("cdclake-hmac-sha256 ")
        real = json.loads(genuine[0].split("\n", 1)[1])
        payloads = [*forgeries(real), genuine[0].encode()]  # the last: a verbatim replay
        with connect_as(pg, database, mallory) as conn:
            for transactional in (True, False):
                for p in payloads:
                    conn.execute("SELECT pg_logical_emit_message(%s, 'cdclake.ddl', %s::bytea)",
                                 (transactional, p))
            # forged messages inside a transaction that writes acct, after its own insert
            with conn.transaction():
                conn.execute("INSERT INTO acct VALUES (2, 'mine')")
                for p in payloads:
                    conn.execute("SELECT pg_logical_emit_message(true, 'cdclake.ddl', %s::bytea)",
                                 (p,))
                conn.execute("INSERT INTO acct VALUES (3, 'still text')")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT cdclake.emit(%s::jsonb)", (json.dumps(real),))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT pg_read_file('cdclake_ddl.key')")
            # the old recursion guard no longer hides DDL from the triggers
            conn.execute("SET cdclake.in_ddl_trigger = 'on'")
            conn.execute("CREATE TABLE mallory_t (id int PRIMARY KEY, a text)")
            conn.execute("ALTER TABLE mallory_t ADD COLUMN b int DEFAULT 7")
            conn.execute("INSERT INTO mallory_t (id, a) VALUES (1, 'x')")
        run_steps(pg, database, [
            ("s", "INSERT INTO acct VALUES (4, 'after', 40)"),
            ("s", "UPDATE acct SET note = 'changed' WHERE id = 1"),
            ("s", "DELETE FROM acct WHERE id = 2")])
        cap.end_lsn = archive_all(pg, database)
        expected = as_lines(oracle(pg, cap))
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    with caplog.at_level(logging.WARNING, logger="cdclake"):
        # one process: the warnings are logged where caplog sees them
        actual, _ = ours(pg, cap, spill_dir=tmp_path / "spill", jobs=1)
    assert actual == expected, diff(expected, actual)
    assert any("'changed'" in line for line in actual)
    assert any("mallory_t" in line and "b[integer]:7" in line for line in actual)
    warned = [r.getMessage() for r in caplog.records
              if "ignoring a forged cdclake.ddl message" in r.getMessage()]
    # every payload three times: alone transactional, alone not, inside the writing txn
    assert len(warned) == 3 * len(payloads), warned
    assert all(re.search(r" at [0-9A-F]+/[0-9A-F]+", w) for w in warned)
    assert sum("not transactional" in w for w in warned) == len(payloads)
    assert sum("signed for transaction" in w for w in warned) == 2  # the replays
