"""A workload for the Spark decode tests, run on a real PostgreSQL, and its archived segments.

It starts in a fresh segment (after a running-xacts record, so decoding from that segment is
complete), installs cdclake, and spreads a long transaction (with a subtransaction and a
schema change committed while it runs) over several 1 MiB segments, so batches cut at segment
boundaries leave it open across the cut. It covers inserts, multi-inserts (COPY), updates
(key-changing, unchanged TOAST), deletes, TRUNCATE (in a large transaction that loads the
table again, as pgbench -i does), a rollback, a table rewrite (VACUUM FULL), a table with
REPLICA IDENTITY NOTHING and one without a key.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from cdclake.catalog.install import install
from cdclake.catalog.signing import fetch_key
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_segment_name

SEGMENT_SIZE = 1024 * 1024

SETUP = [
    "CREATE TABLE acct (id int PRIMARY KEY, owner text, balance numeric(12,2), note text)",
    "CREATE TABLE logs (at timestamptz DEFAULT '2024-01-01 00:00:00+00', msg text)",
    "CREATE TABLE nothing (id int, v text)",
    "ALTER TABLE nothing REPLICA IDENTITY NOTHING",
    "CREATE TABLE big (id int PRIMARY KEY, doc text)",
    "ALTER TABLE big ALTER doc SET STORAGE EXTERNAL",
]

#: ~1 MiB of WAL per statement: incompressible 1 kB rows
FILL = ("INSERT INTO logs (msg) SELECT string_agg(md5(i::text || '-' || j::text), '') "
        "FROM generate_series(1, 1000) i, generate_series(1, 30) j GROUP BY i")


@dataclass
class Archived:
    database: str
    db_oid: int
    directory: Path  #: a copy of the workload's segments, first to last
    segments: list[str]
    key: bytes  #: signed the database's cdclake.ddl messages


def start(pg: LocalPostgres, database: str, setup: list[str]) -> str:
    """Begin a fresh segment, install cdclake, run ``setup``; the segment the switch ended
    (:func:`archived` copies from the one after it)."""
    first = pg.sql("SELECT pg_walfile_name(pg_current_wal_lsn())", database)[0][0]
    pg.sql("SELECT pg_switch_wal()", database)
    pg.sql("CHECKPOINT", database)  # a running-xacts record early in the first segment
    install(pg.dsn(database))
    for sql in setup:
        pg.sql(sql, database)
    return str(first)


def run(pg: LocalPostgres, database: str, directory: Path) -> Archived:
    """Run the workload and copy its archived segments into ``directory``."""
    first = start(pg, database, SETUP)
    long = pg.connect(database)
    other = pg.connect(database)
    try:
        long.execute("BEGIN")
        long.execute("INSERT INTO acct SELECT i, 'owner' || i, i * 10, NULL "
                     "FROM generate_series(1, 50) i")
        other.execute(FILL)
        long.execute("SAVEPOINT s1")
        long.execute("UPDATE acct SET balance = balance + 1 WHERE id <= 20")
        long.execute("INSERT INTO nothing SELECT i, 'n' || i FROM generate_series(1, 5) i")
        other.execute(FILL)
        long.execute("RELEASE SAVEPOINT s1")
        long.execute("SAVEPOINT s2")
        long.execute("DELETE FROM acct WHERE id = 50")
        long.execute("ROLLBACK TO SAVEPOINT s2")
        # a schema change committed while the long transaction runs (on a table it does not
        # lock: it would wait for the long transaction otherwise)
        other.execute("ALTER TABLE big ADD COLUMN flag boolean DEFAULT true")
        other.execute(FILL)
        long.execute("UPDATE acct SET id = id + 1000 WHERE id = 1")
        other.execute("BEGIN")
        other.execute("INSERT INTO acct (id, owner) VALUES (-1, 'never')")
        other.execute("ROLLBACK")
        long.execute("COMMIT")
        # a rewrite: acct gets a new relfilenode, known only from pg_class rows in the WAL
        other.execute("VACUUM FULL acct")
        other.execute("UPDATE acct SET note = 'after rewrite' WHERE id BETWEEN 2 AND 4")
        with other.cursor() as cur, cur.copy("COPY acct (id, owner, balance) FROM STDIN") as cp:
            for i in range(100, 160):
                cp.write_row((i, f"copied {i}", i))
        other.execute("INSERT INTO big SELECT i, string_agg(md5(i::text || j::text), ''), "
                      "i % 2 = 0 FROM generate_series(1, 3) i, generate_series(1, 200) j "
                      "GROUP BY i")
        other.execute("UPDATE big SET id = id WHERE id = 2")  # doc not logged: unchanged TOAST
        other.execute(FILL)
        other.execute("UPDATE nothing SET v = 'changed' WHERE id = 2")
        other.execute("DELETE FROM nothing WHERE id = 3")
        other.execute("DELETE FROM acct WHERE id BETWEEN 100 AND 109")
        other.execute("UPDATE logs SET msg = 'short' WHERE ctid = '(0,1)'")
        # as pgbench -i loads: TRUNCATE (a new relfilenode) and a bulk load in one
        # transaction, large enough to be split by stripes of WAL
        other.execute("BEGIN")
        other.execute("TRUNCATE logs")
        other.execute(FILL)
        other.execute("COMMIT")
    finally:
        long.close()
        other.close()
    last = archive_current(pg, database)
    return archived(pg, database, first, last, directory)


def archived(pg: LocalPostgres, database: str, first: str, last: str,
             directory: Path) -> Archived:
    """Copy the segments after ``first`` (the one pg_switch_wal ended) up to ``last``."""
    lo = parse_segment_name(first, SEGMENT_SIZE).segno + 1  # the segment pg_switch_wal began
    hi = parse_segment_name(last, SEGMENT_SIZE).segno
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for path in sorted(pg.archive_dir.iterdir()):
        if len(path.name) == 24 and lo <= parse_segment_name(path.name, SEGMENT_SIZE).segno <= hi:
            shutil.copyfile(path, directory / path.name)
            names.append(path.name)
    db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = current_database()",
                    database)[0][0]
    with pg.connect(database) as conn:
        key = fetch_key(conn)
    return Archived(database, int(db_oid), directory, names, key)


def archive_current(pg: LocalPostgres, database: str, timeout: float = 60.0) -> str:
    """Switch segments and wait until the finished one is archived; its name."""
    return pg.archive_current_segment(database, timeout)[0]
