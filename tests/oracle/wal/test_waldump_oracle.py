"""The reader against pg_waldump on WAL a live PostgreSQL 15 / 18 just wrote.

One mixed workload per server (tests/oracle/wal/workload.py) writes ~6 MiB of WAL; its
archived (complete) segments are read by both pg_waldump and cdclake, and every record's
(lsn, prev, xid, rmgr, tot_len, rec_len, block refs) must be equal. The remaining tests check
that the compared range really holds the shapes that make reading hard.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cdclake import _waldump, native, waldump  # type: ignore[attr-defined]
from cdclake.cli import main as cli_main
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.wal.image import restore_page
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import (
    BKPIMAGE_COMPRESS_LZ4,
    BKPIMAGE_COMPRESS_PGLZ,
    BKPIMAGE_COMPRESS_ZSTD,
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_XLOG_ID,
    XLogRecord,
)
from cdclake.wal.rmgr import heap
from tests.oracle.wal import workload
from tests.support import pgwaldump

pytestmark = pytest.mark.oracle

METHOD_BITS = {"pglz": BKPIMAGE_COMPRESS_PGLZ, "lz4": BKPIMAGE_COMPRESS_LZ4,
               "zstd": BKPIMAGE_COMPRESS_ZSTD}


@dataclass
class Compared:
    """Both readers' output over the workload's complete segments."""

    pg: LocalPostgres
    info: workload.WorkloadInfo
    segments: list[Path]
    theirs: list[pgwaldump.Row]
    mine: list[pgwaldump.Row]
    reader: XLogReader
    records: list[XLogRecord]
    stderr: str


#: the server's archive -> what :func:`recorded` made there
_RECORDED: dict[Path, tuple[Any, ...]] = {}


@pytest.fixture(scope="module")
def recorded(pg: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ...]:
    """The workload's WAL and what pg_waldump says about it: once per server, whichever
    implementation asks first (the session keeps the server, and this, for the other)."""
    if pg.archive_dir not in _RECORDED:
        db = pg.create_database(f"waloracle{pg.version}")
        info = workload.run_workload(pg, db)
        segs = workload.copy_segments(pg, info.first_segment, info.last_segment,
                                      tmp_path_factory.mktemp(f"wal{pg.version}"))
        theirs, stderr = pgwaldump.run(pg.tool("pg_waldump"), segs[0], segs[-1])
        _RECORDED[pg.archive_dir] = (info, segs, theirs, stderr)
    return _RECORDED[pg.archive_dir]


@pytest.fixture(scope="module")
def compared(pg: LocalPostgres, recorded: tuple[Any, ...], implementation: str) -> Compared:
    """The same WAL read by cdclake, with each implementation of the reader."""
    info, segs, theirs, stderr = recorded
    mine, reader, recs = pgwaldump.ours(segs)
    return Compared(pg, info, segs, theirs, mine, reader, recs, stderr)


def test_every_record_equals_pg_waldump(compared: Compared) -> None:
    c = compared
    assert len(c.theirs) > 1000, f"pg_waldump printed too little: {c.stderr}"
    for i, (a, b) in enumerate(zip(c.mine, c.theirs, strict=False)):
        assert a == b, f"record {i}: ours {a} != pg_waldump {b}"
    assert len(c.mine) == len(c.theirs), c.stderr
    assert c.reader.version == c.pg.version


def test_range_holds_the_hard_shapes(compared: Compared) -> None:
    c = compared
    size = c.reader.segment_size
    assert size == 1 << 20 and len(c.segments) >= 4
    straddling = [r for r in c.records if r.lsn // size != (r.end_lsn - 1) // size]
    assert straddling, "a record crossing a segment boundary"
    assert any(r.tot_len > size for r in straddling), "the large logical message"
    assert any(8192 < r.tot_len < size for r in c.records), "a record longer than a page"
    assert any(r.rmid == RM_XLOG_ID and r.info & 0xF0 == 0x40 for r in c.records), "SWITCH"
    assert any(r.rmid == RM_HEAP2_ID and r.info & 0x70 == 0x50 for r in c.records), "COPY"
    assert any(r.rmid == RM_LOGICALMSG_ID for r in c.records)
    assert any(b.fork == 2 for r in c.records for b in r.blocks), "visibility-map blocks"
    assert any(r.toplevel_xid for r in c.records), "a subtransaction's first record"
    toast = [r for r in c.records if r.rmid == RM_HEAP_ID and r.info & 0x70 == 0
             and isinstance(p := heap.parse(r), heap.HeapInsert)
             and p.flags & heap.XLH_INSERT_ON_TOAST_RELATION]
    assert len(toast) >= 30, "TOAST chunk inserts"


@pytest.mark.parametrize("method", sorted(METHOD_BITS))
def test_compressed_full_page_images(compared: Compared, method: str) -> None:
    """FPIs written with each wal_compression method restore to a plausible page."""
    c = compared
    if method in c.info.skipped_compressions:
        pytest.skip(f"PostgreSQL {c.pg.version} here is built without {method}: "
                    f"{c.info.skipped_compressions[method]}")
    images = [(r, b) for r in c.records for b in r.blocks
              if b.image is not None and b.bimg_info & METHOD_BITS[method]]
    assert images, f"no {method} images although wal_compression={method} was set"
    for rec, blk in images:
        page = restore_page(blk)
        assert len(page) == 8192
        pd_lsn = (int.from_bytes(page[0:4], "little") << 32) | int.from_bytes(page[4:8],
                                                                              "little")
        pd_lower = int.from_bytes(page[12:14], "little")
        pd_upper = int.from_bytes(page[14:16], "little")
        assert pd_lsn <= rec.lsn, f"page LSN after the record at {rec.lsn:X}"
        assert 24 <= pd_lower <= pd_upper <= 8192


def test_cli_waldump_json_equals_pg_waldump(compared: Compared,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    c = compared
    assert cli_main(["waldump", "--json", str(c.segments[0].parent)]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = [(parse_lsn(o["lsn"]), parse_lsn(o["prev"]), o["xid"], o["rmgr"],
             o["tot_len"], o["rec_len"], tuple((b["id"], b["rel"], b["fork"], b["blk"],
                                                b["image"]) for b in o["blocks"]))
            for o in objs]
    assert rows == c.theirs
    messages = [o for o in objs if o["rmgr"] == "LogicalMessage"]
    assert any('prefix "cdclake.big"; payload (1300000 bytes)' in o["desc"] for o in messages)


def test_compiled_lines_equal_the_reference(compared: Compared) -> None:
    """Every record of the live WAL, large messages and TOAST included: the compiled
    ``waldump`` line and description are the Python reference's, character for character."""
    c = compared
    with native.use_python():
        python_line, python_describe = waldump.record_json_line, waldump.describe
    for rec in c.records:
        assert _waldump.record_json_line(rec, c.pg.version) == python_line(rec, c.pg.version)
        assert _waldump.describe(rec, c.pg.version) == python_describe(rec, c.pg.version)


def test_cli_text_matches_pg_waldump_line_heads(compared: Compared,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Everything up to ``desc:`` and the block references are pg_waldump's, to the byte."""
    c = compared
    pg_text = subprocess.run([c.pg.tool("pg_waldump"), str(c.segments[0]), str(c.segments[-1])],
                             capture_output=True, text=True, check=False).stdout.splitlines()
    assert cli_main(["waldump", *map(str, c.segments)]) == 0
    ours = capsys.readouterr().out.splitlines()
    assert len(ours) == len(pg_text)
    for a, b in zip(ours, pg_text, strict=True):
        assert a.split("desc: ")[0] == b.split("desc: ")[0]
        assert _blkrefs(a) == _blkrefs(b), (a, b)


def _blkrefs(line: str) -> str:
    """The block-reference tail of a pg_waldump line (descriptions never contain it)."""
    at = line.find(", blkref #")
    return "" if at < 0 else line[at:]
