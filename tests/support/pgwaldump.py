"""pg_waldump as the oracle: run it, parse its default text output, and put our reader's
records in the same shape so the two can be compared record by record.

Shared by the oracle tests (live servers) and by the unit-fixture generator, so that the
expectations committed next to the fixtures come from exactly the same parsing.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cdclake.decoding.rmgrs import rmgr_name
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import FORK_NAMES, XLogRecord
from cdclake.wal.source import DirectorySource

#: (id, "spc/db/rel", fork name, block number, has image)
Block = tuple[int, str, str, int, bool]
#: (lsn, prev, xid, rmgr, tot_len, rec_len, blocks)
Row = tuple[int, int, int, str, int, int, tuple[Block, ...]]

_LINE = re.compile(
    r"^rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s*(?P<rec>\d+)/\s*(?P<tot>\d+), "
    r"tx:\s*(?P<xid>\d+), lsn: (?P<lsn>[0-9A-F]+/[0-9A-F]+), "
    r"prev (?P<prev>[0-9A-F]+/[0-9A-F]+), desc: (?P<rest>.*)$")
_BLKREF = re.compile(r", blkref #(\d+): rel (\d+/\d+/\d+)(?: fork (\w+))? blk (\d+)"
                     r"( FPW(?: for WAL verification)?)?")


def parse_text(text: str) -> list[Row]:
    """Rows from pg_waldump's default output; every non-empty line must be a record line."""
    rows: list[Row] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise AssertionError(f"unexpected pg_waldump line: {line!r}")
        blocks = tuple((int(b[0]), b[1], b[2] or "main", int(b[3]), bool(b[4]))
                       for b in _BLKREF.findall(m["rest"]))
        rows.append((parse_lsn(m["lsn"]), parse_lsn(m["prev"]), int(m["xid"]), m["rmgr"],
                     int(m["tot"]), int(m["rec"]), blocks))
    return rows


def run(pg_waldump: str, first: Path, last: Path) -> tuple[list[Row], str]:
    """pg_waldump over the segments first..last (same directory); (rows, stderr).

    pg_waldump exits 1 when the WAL ends inside the range (a record continuing into a segment
    not given); its records up to there are still valid output, so only stdout is parsed.
    """
    out = subprocess.run([pg_waldump, str(first), str(last)], capture_output=True, text=True,
                         check=False)
    return parse_text(out.stdout), out.stderr


def row_of(rec: XLogRecord) -> Row:
    """Our record in the oracle's shape."""
    return (rec.lsn, rec.prev, rec.xid, rmgr_name(rec.rmid), rec.tot_len, rec.rec_len,
            tuple((b.id, str(b.rlocator), FORK_NAMES[b.fork], b.blkno, b.image is not None)
                  for b in rec.blocks))


def ours(paths: Iterable[Path | str]) -> tuple[list[Row], XLogReader, list[XLogRecord]]:
    """Every record our reader yields from ``paths``: rows, the reader, the records."""
    reader = XLogReader(DirectorySource(list(paths)))
    recs = list(reader)
    return [row_of(r) for r in recs], reader, recs


def row_to_json(row: Row) -> list[Any]:
    """A row as committed in the fixtures' expectation files (LSNs in PostgreSQL's notation)."""
    lsn, prev, xid, rm, tot, rec, blocks = row
    return [format_lsn(lsn), format_lsn(prev), xid, rm, tot, rec, [list(b) for b in blocks]]


def row_from_json(item: list[Any]) -> Row:
    lsn, prev, xid, rm, tot, rec, blocks = item
    return (parse_lsn(lsn), parse_lsn(prev), xid, rm, tot, rec,
            tuple((b[0], b[1], b[2], b[3], b[4]) for b in blocks))
