"""Savepoints on Spark: every change of a subtransaction reaches the change stream.

A subtransaction names its top-level transaction only on its first WAL record. When that
record is one decoding ignores (the heap LOCK of ``SELECT ... FOR UPDATE`` right after a
``SAVEPOINT``), routing still has to learn the assignment from it, or the subtransaction's
later changes go to a partition that does not own the transaction and are lost. The workload
makes that happen many times (four sessions interleaving small transactions with savepoints,
``ROLLBACK TO SAVEPOINT`` and row locks, a prepared transaction, and a long transaction of
30k inserts and periodic updates that commits last), the WAL is decoded on Spark in batches
cut at every segment boundary with a 4 kB work_mem, and the stream must equal a
``test_decoding`` slot's changes and the single-process decode.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.spark.job import BatchResult, decode_batch
from cdclake.stream.progress import load_progress
from tests.e2e.spark.helpers import local_decode, rows, ship_to, tables_of
from tests.e2e.spark.workload import Archived, archive_current, archived, start

pytestmark = pytest.mark.e2e

TABLES = ("public.acct", "public.stock", "public.orders", "public.bulk")
SETUP = [
    "CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL, note text)",
    "CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)",
    "CREATE TABLE orders (id serial PRIMARY KEY, acct int, item int, qty int)",
    "CREATE TABLE bulk (id int PRIMARY KEY, v text)",
    "INSERT INTO acct SELECT i, 1000, NULL FROM generate_series(1, 200) i",
    "INSERT INTO stock SELECT i, 100 FROM generate_series(1, 200) i",
]
SESSIONS = 4
ROUNDS = 10
BULK_ROWS = 30_000

#: one change as both sides can name it: (top-level xid, table, op, primary key)
Key = tuple[int, str, str, int]


def small_transaction(s: int, r: int) -> list[str]:
    """Session ``s``'s transaction in round ``r``: savepoints whose first record is a lock.

    Each (session, round) works on its own rows, so interleaved sessions never wait.
    """
    k = 4 * (r * SESSIONS + s)
    a, b, c = k + 1, k + 2, k + 3
    out = [
        "BEGIN",
        f"UPDATE acct SET bal = bal - 1 WHERE id = {a}",
        "SAVEPOINT sa",
        f"SELECT bal FROM acct WHERE id = {b} FOR UPDATE",
        f"UPDATE acct SET bal = bal + 1, note = 'r{r}' WHERE id = {b}",
        f"INSERT INTO orders (acct, item, qty) VALUES ({b}, {a}, 1)",
        f"UPDATE stock SET qty = qty - 1 WHERE id = {a}",
        "SAVEPOINT sb",
        f"SELECT qty FROM stock WHERE id = {b} FOR UPDATE",
        f"INSERT INTO orders (acct, item, qty) VALUES ({b}, {b}, 2)",
        f"UPDATE stock SET qty = qty - 2 WHERE id = {b}",
        "ROLLBACK TO SAVEPOINT sb" if (s + r) % 2 else "RELEASE SAVEPOINT sb",
        "SAVEPOINT sc",  # nested in sa
        f"SELECT bal FROM acct WHERE id = {c} FOR UPDATE",
        f"UPDATE acct SET bal = bal + 2 WHERE id = {c}",
        f"DELETE FROM stock WHERE id = {c}",
        "RELEASE SAVEPOINT sc",
    ]
    if r % 3 == 2:
        out.append("ROLLBACK TO SAVEPOINT sa")  # sa, sb and sc with it
    out += [f"UPDATE acct SET note = 'done' WHERE id = {a}", "COMMIT"]
    return out


def long_round(r: int) -> list[str]:
    """The long transaction's periodic work: updates, one in a savepoint that starts locked."""
    return [
        f"UPDATE bulk SET v = 'round {r}' WHERE id % {ROUNDS} = {r} AND id <= 10000",
        f"SAVEPOINT l{r}",
        f"SELECT v FROM bulk WHERE id = {BULK_ROWS - r} FOR UPDATE",
        f"UPDATE bulk SET v = 'saved {r}' WHERE id % {ROUNDS} = {r} AND id > 20000",
        f"RELEASE SAVEPOINT l{r}" if r % 4 else f"ROLLBACK TO SAVEPOINT l{r}",
    ]


def prepared(step: int) -> list[str]:
    """A two-phase transaction with savepoints, prepared mid-workload, committed later."""
    if step == 0:
        return ["BEGIN", "UPDATE acct SET bal = 0 WHERE id = 190", "SAVEPOINT p1",
                "SELECT bal FROM acct WHERE id = 191 FOR UPDATE",
                "UPDATE acct SET bal = 1 WHERE id = 191",
                "INSERT INTO orders (acct, item, qty) VALUES (191, 191, 9)",
                "SAVEPOINT p2", "SELECT qty FROM stock WHERE id = 192 FOR UPDATE",
                "UPDATE stock SET qty = 7 WHERE id = 192", "RELEASE SAVEPOINT p2",
                "PREPARE TRANSACTION 'cdclake_sp'"]
    return ["COMMIT PREPARED 'cdclake_sp'"]


@dataclass
class Workload:
    archived: Archived
    slot_lsn: int
    slot: list[str]  #: the test_decoding slot's lines (include-xids)


def run_workload(pg: LocalPostgres, database: str, directory: Path) -> Workload:
    """Run everything, read the slot, and copy the archived segments into ``directory``."""
    first = start(pg, database, SETUP)
    slot = f"subxacts_{database}"
    slot_lsn = parse_lsn(pg.sql(
        "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'test_decoding')",
        database, (slot,))[0][0])
    conns = {name: pg.connect(database) for name in ("long", "p", *map(str, range(SESSIONS)))}
    try:
        long = conns["long"]
        long.execute("BEGIN")
        long.execute(f"INSERT INTO bulk SELECT i, md5(i::text) FROM generate_series(1, "
                     f"{BULK_ROWS}) i")
        for r in range(ROUNDS):
            if r in (2, 7):
                for sql in prepared(0 if r == 2 else 1):
                    conns["p"].execute(sql)
            # the four sessions' transactions interleaved statement by statement
            scripts = [small_transaction(s, r) for s in range(SESSIONS)]
            for step in itertools.zip_longest(*scripts):
                for s, sql in enumerate(step):
                    if sql is not None:
                        conns[str(s)].execute(sql)
            for sql in long_round(r):
                long.execute(sql)
        long.execute("COMMIT")
        last = archive_current(pg, database)
        with pg.connect(database) as conn:
            lines = [row[0] for row in conn.execute(
                "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
                "'include-xids', '1', 'skip-empty-xacts', '1')", (slot,)).fetchall()]
    finally:
        for conn in conns.values():
            conn.close()
        if pg.sql("SELECT 1 FROM pg_prepared_xacts WHERE gid = 'cdclake_sp'"):
            pg.sql("ROLLBACK PREPARED 'cdclake_sp'", database)
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (slot,))
    return Workload(archived(pg, database, first, last, directory), slot_lsn, lines)


_CHANGE = re.compile(r"^table (\S+): (INSERT|UPDATE|DELETE): .*?\bid\[integer\]:(-?\d+)")
_OPS = {"INSERT": stream.OP_INSERT, "UPDATE": stream.OP_UPDATE, "DELETE": stream.OP_DELETE}


def slot_changes(lines: list[str]) -> Counter[Key]:
    """The slot's changes of the workload's tables (no key changes: the first id is the key)."""
    out: Counter[Key] = Counter()
    xid = 0
    for line in lines:
        if line.startswith("BEGIN "):
            xid = int(line.split()[1])
        elif line.startswith("table "):
            m = _CHANGE.match(line)
            assert m, line
            if m[1] in TABLES:
                out[(xid, m[1], _OPS[m[2]], int(m[3]))] += 1
    return out


def stream_changes(tables: dict[str, Any], since: int) -> Counter[Key]:
    """The change stream's changes of transactions committed from ``since`` on."""
    out: Counter[Key] = Counter()
    for name in TABLES:
        for r in rows(tables[name]):
            if r[stream.COMMIT_LSN] < since:
                continue
            key = r["id"] if r[stream.OP] != stream.OP_DELETE else r[stream.OLD_KEY]["id"]
            out[(r[stream.XID], name, r[stream.OP], key)] += 1
    return out


def per_xid(changes: Counter[Key]) -> dict[int, int]:
    out: dict[int, int] = {}
    for (xid, *_), n in changes.items():
        out[xid] = out.get(xid, 0) + n
    return out


def test_subtransaction_changes_survive_the_shuffle(pg: LocalPostgres, database: str,
                                                    tmp_path: Path, spark: Any) -> None:
    w = run_workload(pg, database, tmp_path / "wal")
    expected = slot_changes(w.slot)
    assert len(per_xid(expected)) >= SESSIONS * ROUNDS + 2, "the workload did not run"
    assert len(w.archived.segments) >= 4, "the workload must span several segments"

    home = tmp_path / "spark"
    config = Config(home=home, store_url=(home / "store").as_uri(),
                    source_dsn=pg.dsn(database), spark_partitions=2, spill_dir=home / "spill",
                    work_mem=4096)
    ship_to(config, w.archived)
    store = open_store(config)
    batches: list[BatchResult] = []
    carried_subxacts = carried_prepared = 0
    for until in [*w.archived.segments, None]:  # one batch per segment
        result = decode_batch(config, spark=spark, until_segment=until)
        if result is not None:
            batches.append(result)
            progress = load_progress(store, Layout())
            assert progress is not None
            open_txns = progress.open_txns
            carried_subxacts += sum(1 for t in open_txns if t.top)
            carried_prepared += sum(1 for t in open_txns if t.prepared)
            # once each, or once per partition's part of a split transaction
            assert len({(t.xid, t.part) for t in open_txns}) == len(open_txns), "saved twice"
    assert len(batches) >= 4
    assert carried_subxacts, "no subtransaction was open across a cut"
    assert carried_prepared, "the prepared transaction was not open across a cut"
    assert sum(b.stats["spilled_changes"] for b in batches) > 0
    got_tables = tables_of(home / "store" / "changes", [b.batch for b in batches])
    got = stream_changes(got_tables, w.slot_lsn)

    want, have = per_xid(expected), per_xid(got)
    wrong = {x: (want.get(x), have.get(x)) for x in want.keys() | have.keys()
             if want.get(x) != have.get(x)}
    assert not wrong, f"changes per transaction (slot, spark) differ: {wrong}"
    assert got == expected
    assert sum(got.values()) > BULK_ROWS

    # and the single-process decode of the same WAL says the same, row for row
    local_decode(w.archived, tmp_path / "ref", tmp_path / "ref-spill")
    local = tables_of(tmp_path / "ref", ["local"])
    assert stream_changes(local, w.slot_lsn) == expected
    for name in TABLES:
        assert rows(got_tables[name]) == rows(local[name]), name
