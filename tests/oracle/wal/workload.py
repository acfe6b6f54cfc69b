"""Workloads that make a real server write the WAL shapes the reader must get right.

Each piece exists for a reason the reader can get wrong: full-page images (with every
``wal_compression`` method the server accepts), records longer than a page (COPY's
multi-inserts, a large logical message), a record longer than a whole 1 MiB segment (so it
straddles a segment boundary), an XLOG_SWITCH in the middle, TOAST chunks, subtransactions,
two-phase commit, VACUUM (visibility-map fork blocks), index builds and TRUNCATE.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from cdclake.local.postgres import LocalPostgres

COMPRESSIONS = ("pglz", "lz4", "zstd")


def supported_compressions(pg: LocalPostgres, dbname: str = "postgres") -> dict[str, str]:
    """wal_compression method -> "" if the server accepts it, else the server's error."""
    import psycopg

    out: dict[str, str] = {}
    with pg.connect(dbname) as conn:
        for method in COMPRESSIONS:
            try:
                conn.execute(f"SET wal_compression = {method}")
                out[method] = ""
            except psycopg.Error as exc:
                out[method] = str(exc).strip().splitlines()[0]
    return out


def current_segment(pg: LocalPostgres) -> str:
    """Name of the segment the server is writing now."""
    return str(pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0])


def switch_and_archive(pg: LocalPostgres, timeout: float = 60.0) -> str:
    """Close the current segment (pg_switch_wal) and wait until it is archived; its name."""
    last = current_segment(pg)
    pg.sql("SELECT pg_switch_wal()")
    deadline = time.monotonic() + timeout
    while not (pg.archive_dir / last).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"segment {last} was not archived within {timeout}s")
        time.sleep(0.05)
    return last


def copy_segments(pg: LocalPostgres, first: str, last: str, dest: Path) -> list[Path]:
    """Copy archived segments first..last (same timeline) into ``dest``; their new paths."""
    dest.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in pg.archive_dir.iterdir()
                   if len(p.name) == 24 and first <= p.name <= last)
    out = []
    for name in names:
        shutil.copyfile(pg.archive_dir / name, dest / name)
        out.append(dest / name)
    return out


@dataclass
class WorkloadInfo:
    """What the workload did, for the tests' coverage assertions."""

    first_segment: str
    last_segment: str
    compressions: list[str] = field(default_factory=list)
    skipped_compressions: dict[str, str] = field(default_factory=dict)


def run_workload(pg: LocalPostgres, dbname: str, *, rows: int = 3000,
                 big_message: int = 1_300_000, compressible: bool = False,
                 pad_repeat: int = 8) -> WorkloadInfo:
    """Run the mixed workload in ``dbname``; returns the segment range it wrote.

    ``compressible`` keeps the data repetitive so the committed unit fixtures stay small.
    """
    methods = supported_compressions(pg, dbname)
    info = WorkloadInfo(first_segment="", last_segment="")
    info.compressions = [m for m, err in methods.items() if not err]
    info.skipped_compressions = {m: err for m, err in methods.items() if err}
    # Start on a fresh segment so the range holds only this workload (plus background noise).
    switch_and_archive(pg)
    info.first_segment = current_segment(pg)
    noise = (f"repeat('abcdefgh', {pad_repeat})" if compressible
             else "md5(i::text) || md5((-i)::text)")
    big = "repeat('0123456789', 1500)" if compressible else \
        "(SELECT string_agg(md5(id::text || g::text), '') FROM generate_series(1, 400) g)"
    with pg.connect(dbname) as conn:
        ex = conn.execute
        ex("CREATE TABLE t (id int PRIMARY KEY, pad text, big text)")
        ex("ALTER TABLE t ALTER big SET STORAGE EXTERNAL")  # TOAST chunks, never compressed
        ex(f"INSERT INTO t SELECT i, {noise}, NULL FROM generate_series(1, {rows}) i")
        # large TOAST values (each > 2 kB goes to the toast table in ~2 kB chunks)
        ex(f"UPDATE t SET big = {big} WHERE id % 100 = 1")
        # COPY: heap2 MULTI_INSERT records of nearly a page of tuples (+INIT)
        ex("CREATE TABLE c (id int, note text)")
        with conn.cursor().copy("COPY c (id, note) FROM STDIN") as copy:
            for i in range(rows * 2):
                copy.write_row((i, f"copy row {i} " + "x" * 40))
        # full-page images, once per compression method the server accepts
        for method in ["off", *info.compressions]:
            ex("CHECKPOINT")
            ex(f"SET wal_compression = {method}")
            ex("UPDATE t SET pad = pad || 'u' WHERE id % 3 = 0")
        ex("RESET wal_compression")
        # a record bigger than a whole 1 MiB segment: it must straddle a segment boundary
        ex("SELECT pg_logical_emit_message(true, 'cdclake.big', repeat('m', %s))",
           (big_message,))
        ex("SELECT pg_logical_emit_message(false, 'cdclake.small', 'hello')")
        # subtransactions (TOPLEVEL_XID / assignment) and two-phase commit
        with conn.transaction():
            ex("INSERT INTO t VALUES (-1, 'top', NULL)")
            with conn.transaction():
                ex("INSERT INTO t VALUES (-2, 'sub', NULL)")
        ex("BEGIN")
        ex("INSERT INTO t VALUES (-3, 'prepared', NULL)")
        ex("PREPARE TRANSACTION 'cdclake_wal_test'")
        ex("COMMIT PREPARED 'cdclake_wal_test'")
        ex("SELECT pg_switch_wal()")  # XLOG_SWITCH inside the compared range
        ex("DELETE FROM t WHERE id % 7 = 0")
        ex("VACUUM t")  # prune/freeze records and visibility-map fork blocks
        ex("CREATE INDEX ON c (id)")
        ex("TRUNCATE c")
        ex("ALTER TABLE t ADD COLUMN extra int DEFAULT 5")
        ex("DROP TABLE c")
    info.last_segment = switch_and_archive(pg)
    return info
