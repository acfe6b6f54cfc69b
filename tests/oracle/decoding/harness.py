"""Runs a workload on a real PostgreSQL and decodes its archived WAL both ways.

The oracle: a ``test_decoding`` slot created (after ``cdclake source install``) on the server
that writes the WAL. Ours: ``cdclake.decoding.parallel.decode_lines`` over the segments the server
archived (two decoding processes, as ``cdclake decode --jobs 2``), from an LSN taken before
the install, emitting from the slot's creation LSN.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.install import install
from cdclake.decoding.parallel import decode_lines
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.session import DecodeOptions, DecodeResult
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.wal.source import DirectorySource

#: the parallel decode's stripes in these tests: 2**9 = 512 bytes of WAL
STRIPE_BITS = 9

#: a workload step: (session name, SQL); sessions are autocommit connections, so explicit
#: BEGIN/COMMIT in the SQL make multi-statement transactions and let sessions interleave
Step = tuple[str, str]


@dataclass
class Capture:
    database: str
    db_oid: int
    read_from: int
    slot: str
    start_lsn: int
    key: bytes  #: signs the cdclake.ddl messages
    end_lsn: int = 0
    expected: list[str] = field(default_factory=list)
    actual: list[str] = field(default_factory=list)
    result: DecodeResult | None = None


def prepare(pg: LocalPostgres, database: str, setup: Sequence[str] = ()) -> Capture:
    """Run ``setup`` (before the slot: not decoded), install cdclake, create the slot."""
    for sql in setup:
        pg.sql(sql, database)
    read_from = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", database)[0][0])
    key = install(pg.dsn(database)).key
    slot = f"oracle_{database}"
    lsn = pg.sql("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'test_decoding')",
                 database, (slot,))[0][0]
    db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = current_database()",
                    database)[0][0]
    return Capture(database, db_oid, read_from, slot, parse_lsn(lsn), key)


def run_steps(pg: LocalPostgres, database: str, steps: Sequence[Step], *,
              roles: Mapping[str, str] | None = None,
              after: Callable[[], None] | None = None) -> None:
    """Run the steps, each session on its own connection: as the role ``roles`` names for it,
    else as the superuser; ``after`` runs after every step."""
    roles = roles or {}
    conns = {}
    try:
        for session, sql in steps:
            conn = conns.get(session)
            if conn is None:
                conn = conns[session] = pg.connect(database, user=roles.get(session, "postgres"))
            conn.execute(sql)
            if after is not None:
                after()
    finally:
        for conn in conns.values():
            conn.close()


def login_role(pg: LocalPostgres, database: str) -> str:
    """A new plain LOGIN role (no superuser, no other attribute, no membership) that may
    create tables in ``database``'s public schema, as an application's owner does: what it
    may do to its own tables, a table owner anywhere may. Its name."""
    role = f"owner_{database}"
    pg.sql(f'CREATE ROLE "{role}" LOGIN', database)
    pg.sql(f'GRANT CREATE ON SCHEMA public TO "{role}"', database)
    return role


def archive_all(pg: LocalPostgres, database: str, timeout: float = 60.0) -> int:
    """Switch to a new segment and wait until the finished one is archived; its end LSN."""
    return pg.archive_current_segment(database, timeout)[1]


def oracle(pg: LocalPostgres, cap: Capture) -> list[str]:
    """The slot's rows."""
    with pg.connect(cap.database) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
            "'include-xids', '1', 'skip-empty-xacts', '1')", (cap.slot,)).fetchall()
    return [r[0] for r in rows]


def as_lines(rows: list[str]) -> list[str]:
    """Rows as the lines of text they make (a row with a newline in a value is two)."""
    return [line for row in rows for line in row.split("\n")]


def ours(pg: LocalPostgres, cap: Capture, *, work_mem: int = 64 * 1024 * 1024,
         spill_dir: Path, jobs: int = 2,
         tables: frozenset[str] = frozenset()) -> tuple[list[str], DecodeResult]:
    """What ``cdclake decode --jobs JOBS`` writes, as lines of text. Two jobs by default: the
    parallel decode (every worker's share, merged) must equal the slot. Its stripes are
    512 bytes of WAL here, not 256 KiB, so the workloads' transactions, small as they are,
    are split among the workers change by change (TOAST values, speculative inserts,
    subtransactions, TRUNCATE and messages on both sides of a stripe's end). ``tables``: only
    these (``schema.table``), as ``CDCLAKE_TABLES``."""
    out = io.BytesIO()
    options = DecodeOptions(db_oid=cap.db_oid, start_lsn=cap.start_lsn, read_from=cap.read_from,
                            end_lsn=cap.end_lsn or None, work_mem=work_mem, spill_dir=spill_dir,
                            ddl_key=cap.key, tables=tables)
    result = decode_lines(DirectorySource(pg.archive_dir), Dictionary(), options,
                          lambda d, v, write: TestDecoding(write, d.types, version=v), out,
                          jobs=jobs, stripe_bits=STRIPE_BITS)
    return out.getvalue().decode("utf-8", "surrogateescape").split("\n")[:-1], result


def capture(pg: LocalPostgres, database: str, steps: Sequence[Step], *, spill_dir: Path,
            setup: Sequence[str] = (), work_mem: int = 64 * 1024 * 1024,
            roles: Mapping[str, str] | None = None) -> Capture:
    """The whole round: prepare, run (``roles``: as :func:`run_steps`), archive, decode with
    the slot and with cdclake."""
    cap = prepare(pg, database, setup)
    try:
        run_steps(pg, database, steps, roles=roles)
        cap.end_lsn = archive_all(pg, database)
        cap.expected = as_lines(oracle(pg, cap))
        cap.actual, cap.result = ours(pg, cap, work_mem=work_mem, spill_dir=spill_dir)
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    return cap


#: (the server's archive, workload name) -> its capture, shared by both implementations' runs
_CAPTURED: dict[tuple[Path, str], Capture] = {}


def captured_once(pg: LocalPostgres, name: str, make: Callable[[], Capture], *,
                  spill_dir: Path, work_mem: int = 64 * 1024 * 1024) -> Capture:
    """The capture of workload ``name`` on ``pg``: made by ``make`` (a :func:`capture`) the
    first time, and on later calls in this test session (the other implementation's run)
    decoded again from the same archived WAL, the slot's lines kept: the workload, the
    install and the slot run once per server, while every implementation is compared with
    what the slot printed for that very WAL."""
    key = (pg.archive_dir, name)
    first = _CAPTURED.get(key)
    if first is None:
        cap = _CAPTURED[key] = make()
        return cap
    actual, result = ours(pg, first, work_mem=work_mem, spill_dir=spill_dir)
    return replace(first, actual=actual, result=result)


def diff(expected: list[str], actual: list[str]) -> str:
    import difflib

    return "\n".join(difflib.unified_diff(expected, actual, "slot (test_decoding)", "cdclake",
                                          lineterm="", n=2))
