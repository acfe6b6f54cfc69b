"""A table owner drops or disables the TRUNCATE trigger ``cdclake source install`` put on their
table, then truncates it: no ``cdclake.ddl`` message names the table's new relfilenode, yet
``cdclake decode`` must still equal a slot's output, from the WAL alone (the pg_class rows
TRUNCATE updates), with ``CDCLAKE_TABLES`` respected; a re-install puts a dropped trigger
back."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.catalog.install import install
from cdclake.local.postgres import LocalPostgres
from tests.oracle.decoding.harness import capture, diff, login_role, ours
from tests.oracle.decoding.workloads import OWNER, owner_truncates

pytestmark = pytest.mark.oracle

#: the cdclake_truncate trigger of each table: absent, or its pg_trigger.tgenabled
TRIGGERS = ("SELECT c.relname, t.tgenabled FROM pg_class c LEFT JOIN pg_trigger t "
            "ON t.tgrelid = c.oid AND t.tgname = 'cdclake_truncate' "
            "WHERE c.relname IN ('ot', 'od', 'oi', 'op', 'op_lo', 'op_hi', 'keeps') "
            "ORDER BY 1")


def test_truncates_without_the_trigger_decode_from_the_wal(pg: LocalPostgres, database: str,
                                                           tmp_path: Path) -> None:
    owner = login_role(pg, database)
    cap = capture(pg, database, owner_truncates(), spill_dir=tmp_path / "spill",
                  roles={OWNER: owner})
    assert pg.sql(TRIGGERS, database) == [
        ("keeps", "O"), ("od", "D"), ("oi", None), ("op", None), ("op_hi", "D"),
        ("op_lo", None), ("ot", None)], "the owner's workload left a trigger to report it"
    assert sum(": TRUNCATE:" in line for line in cap.expected) == 8
    assert cap.actual == cap.expected, diff(cap.expected, cap.actual)

    # CDCLAKE_TABLES without the truncated tables: their new relfilenodes are theirs, not
    # unknown, so the stream goes on without them
    scoped, _ = ours(pg, cap, spill_dir=tmp_path / "scoped",
                     tables=frozenset({"public.bystander"}))
    changes = [line for line in scoped if line.startswith("table ")]
    expected = [line for line in cap.expected if line.startswith("table public.bystander:")]
    assert len(expected) == 7 and changes == expected, diff(expected, changes)

    install(pg.dsn(database))  # idempotent: puts the dropped triggers back
    assert pg.sql(TRIGGERS, database) == [
        ("keeps", "O"), ("od", "D"), ("oi", "O"), ("op", "O"), ("op_hi", "D"),
        ("op_lo", "O"), ("ot", "O")]
