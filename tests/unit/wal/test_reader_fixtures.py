"""The reader against committed real WAL: every record equals what pg_waldump printed."""

from __future__ import annotations

import itertools
import json
import struct
from pathlib import Path

import pytest

from cdclake import native
from cdclake.cli import main as cli_main
from cdclake.decoding.rmgrs import RMGRS
from cdclake.errors import WalVersionError
from cdclake.lsn import format_lsn, parse_lsn
from cdclake.wal import reader as reader_module
from cdclake.wal.reader import MAGIC_VERSIONS, PAGE_SIZE, XLogReader
from cdclake.wal.source import DirectorySource
from tests.support.pgwaldump import Row, ours, row_of
from tests.unit.wal.conftest import WalFixture

XLOG_SWITCH = 0x40


def _first_mismatch(mine: list[Row], theirs: list[Row]) -> str:
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            return f"record {i}: ours {a} != pg_waldump {b}"
    return f"lengths differ: ours {len(mine)}, pg_waldump {len(theirs)}"


def test_records_equal_pg_waldump(walfix: WalFixture) -> None:
    mine, reader, recs = ours(walfix.segments)
    assert mine == walfix.rows, _first_mismatch(mine, walfix.rows)
    assert reader.version == walfix.version
    assert reader.segment_size == walfix.segment_size
    # every record's CRC was checked and LSNs chain: each prev is the previous record's lsn
    assert all(b.prev == a.lsn for a, b in itertools.pairwise(recs))


def test_compressed_segments_read_directly(walfix: WalFixture) -> None:
    """The archive stores ``.zst`` segments; the reader takes them without unpacking."""
    mine, _, _ = ours(walfix.compressed)
    assert mine == walfix.rows


def test_fixture_covers_the_hard_shapes(wal15: WalFixture) -> None:
    """The PG15 fixture holds what makes reading hard, so the equality above means something."""
    _, reader, recs = ours(wal15.segments)
    size = reader.segment_size
    straddling = [r for r in recs if r.lsn // size != (r.end_lsn - 1) // size]
    assert any(r.tot_len > size for r in straddling), "a record longer than a segment"
    assert any(r.rmid == 0 and r.info & 0xF0 == XLOG_SWITCH for r in recs)
    methods = {b.bimg_info & 0x1C for r in recs for b in r.blocks if b.image is not None}
    assert methods == {0, 0x04, 0x08, 0x10}, "uncompressed, pglz, lz4 and zstd images"


@pytest.mark.parametrize("magic", sorted(MAGIC_VERSIONS))
def test_version_from_page_magic(wal15: WalFixture, magic: int) -> None:
    """Layouts we read are identical in 15-18 at this level: only the magic names the version."""
    for seg in wal15.segments:
        data = bytearray(seg.read_bytes())
        for off in range(0, len(data), PAGE_SIZE):
            struct.pack_into("<H", data, off, magic)
        seg.write_bytes(bytes(data))
    mine, reader, _ = ours(wal15.segments)
    assert reader.version == MAGIC_VERSIONS[magic]
    assert mine == wal15.rows


def test_unknown_page_magic_is_a_clear_error(walfix: WalFixture) -> None:
    first = walfix.segments[0]
    data = bytearray(first.read_bytes())
    struct.pack_into("<H", data, 0, 0xD0FF)
    first.write_bytes(bytes(data))
    with pytest.raises(WalVersionError) as err:
        list(XLogReader(DirectorySource(walfix.segments)))
    msg = str(err.value)
    assert "0xD0FF" in msg and "15-18" in msg
    assert str(first) in msg
    assert format_lsn(walfix.segment_start(first)) in msg


def test_start_and_end_lsn(walfix: WalFixture) -> None:
    rows = walfix.rows
    lo, hi = rows[len(rows) // 3][0], rows[2 * len(rows) // 3][0]
    got = [r.lsn for r in XLogReader(DirectorySource(walfix.dir), start_lsn=lo, end_lsn=hi)]
    assert got == [r[0] for r in rows if lo <= r[0] < hi]



def test_starting_on_any_page_reads_the_records_starting_there(walfix: WalFixture) -> None:
    """A reader given a start LSN begins on its page, not at its segment's start (a Spark
    task reads a piece of a segment this way): from a page boundary — inside a record that
    continues there, even one longer than a segment — or from a record's LSN in the middle of
    a page, it yields exactly the records starting there, each whole, up to the end LSN."""
    rows = walfix.rows
    lsns = [r[0] for r in rows]
    last = lsns[-1]
    pages = range(lsns[0] // PAGE_SIZE * PAGE_SIZE, last, PAGE_SIZE)
    starts = [*pages[::5], *lsns[1::97]]
    straddled = [p for p in pages if all(lsn != p + 24 and lsn != p + 40 for lsn in lsns)]
    assert straddled, "the fixture has pages that begin inside a record"
    starts += straddled[::3]
    for start in starts:
        end = start + 3 * PAGE_SIZE
        reader = XLogReader(DirectorySource(walfix.dir), start_lsn=start, end_lsn=end)
        got = [row_of(r) for r in reader]
        assert got == [r for r in rows if start <= r[0] < end], format_lsn(start)


def test_a_sieve_builds_the_records_it_wants_of_a_walk_that_checks_them_all(
        walfix: WalFixture, implementation: str) -> None:
    """A walk with a sieve (the scans' way to read most records past unbuilt) asks it about
    every record from the start LSN on, telling it the record's header fields, block count,
    first relation and main data, and yields exactly those it wants — the records pg_waldump
    prints there, each whole."""
    module = native.compiled("cdclake.wal._reader") if implementation == "compiled" else None
    base = reader_module.Sieve if module is None else module.Sieve
    asked: list[tuple[int, int, int, int]] = []
    told: dict[int, tuple[int, int, int, bytes]] = {}

    class HeapOnly(base):  # type: ignore[valid-type, misc]
        def wants(self, walk: reader_module.Walk) -> bool:
            asked.append((walk.lsn, walk.prev, walk.xid, walk.tot_len))
            main = bytes(walk.src[walk.main:walk.main + walk.main_len])
            told[walk.lsn] = (walk.toplevel, walk.nblocks, walk.first_rel, main)
            return walk.rmid == 10  # Heap

    rows = walfix.rows
    lo, hi = rows[len(rows) // 4][0], rows[3 * len(rows) // 4][0]
    reader = XLogReader(DirectorySource(walfix.dir), start_lsn=lo, end_lsn=hi)
    got = list(reader_module.walk(reader, HeapOnly()))
    wanted = [r for r in rows if lo <= r[0] < hi]
    assert asked == [(lsn, prev, xid, tot) for lsn, prev, xid, _rm, tot, *_ in wanted]
    assert [row_of(r) for r in got] == [r for r in wanted if r[3] == "Heap"] and got
    for rec in got:  # what the sieve was told is what the built record holds
        first_rel = rec.blocks[0].rlocator.rel if rec.blocks else 0
        assert told[rec.lsn] == (rec.toplevel_xid, len(rec.blocks), first_rel,
                                 bytes(rec.main_data))
    assert reader.end_reason == "end LSN reached"


def test_a_start_lsn_reads_nothing_of_its_segment_before_its_page(walfix: WalFixture,
                                                                  tmp_path: Path) -> None:
    """What precedes the start page is not read, but for the segment's first page (its long
    header gives the segment size): garbage there changes nothing."""
    path = walfix.segments[0]
    data = bytearray(path.read_bytes())
    half = len(data) // 2 // PAGE_SIZE * PAGE_SIZE
    data[PAGE_SIZE:half] = b"\xff" * (half - PAGE_SIZE)
    (tmp_path / path.name).write_bytes(bytes(data))
    start = walfix.segment_start(path) + half
    end = start + 4 * PAGE_SIZE
    got = [row_of(r) for r in XLogReader(DirectorySource(tmp_path), start_lsn=start,
                                         end_lsn=end)]
    assert got and got == [r for r in walfix.rows if start <= r[0] < end]

def test_segments_are_read_along_the_newest_timelines_history(wal15: WalFixture,
                                                               tmp_path: Path) -> None:
    """A history file says timeline 1 ended inside the third segment: timeline 1's copies of
    that segment and the next are an abandoned branch (an old primary's), not read — the
    reader ends where the path's next segment, timeline 2's, is missing; given timeline 2's
    copies, it reads on through them."""
    first, second, third, fourth = wal15.segments
    switch = wal15.segment_start(third) + 0x100
    (wal15.dir / "00000002.history").write_text(f"1\t{format_lsn(switch)}\tno recovery target\n")
    before, _, _ = ours([first, second])
    reader = XLogReader(DirectorySource(wal15.dir))
    got = [row_of(r) for r in reader]
    assert got == before and got[-1][0] < switch
    assert reader.end_of_wal <= wal15.segment_start(third)
    for seg in (third, fourth):  # timeline 2's copies of the switch segment and the next
        (wal15.dir / ("00000002" + seg.name[8:])).write_bytes(seg.read_bytes())
    recs = list(XLogReader(DirectorySource(wal15.dir)))
    assert [row_of(r) for r in recs] == wal15.rows
    assert {r.timeline for r in recs if r.lsn >= wal15.segment_start(third)} == {2}
    assert {r.timeline for r in recs if r.lsn < wal15.segment_start(third)} == {1}


# --- the CLI ---------------------------------------------------------------------------------


def _json_rows(text: str) -> list[Row]:
    out = []
    for line in text.splitlines():
        o = json.loads(line)
        out.append((parse_lsn(o["lsn"]), parse_lsn(o["prev"]), o["xid"], o["rmgr"], o["tot_len"],
                    o["rec_len"], tuple((b["id"], b["rel"], b["fork"], b["blk"], b["image"])
                                        for b in o["blocks"])))
    return out


def test_cli_json_equals_pg_waldump(walfix: WalFixture, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CDCLAKE_HOME", str(tmp_path / "home"))
    assert cli_main(["waldump", "--json", *map(str, walfix.compressed)]) == 0
    assert _json_rows(capsys.readouterr().out) == walfix.rows


def test_cli_text_lines_read_like_pg_waldump(walfix: WalFixture,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["waldump", str(walfix.dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(walfix.rows)
    for line, (lsn, prev, xid, rm, tot, rec, blocks) in zip(lines, walfix.rows, strict=True):
        head = (f"rmgr: {rm:<11} len (rec/tot): {rec:6}/{tot:6}, tx: {xid:10}, "
                f"lsn: {lsn >> 32:X}/{lsn & 0xFFFFFFFF:08X}, "
                f"prev {prev >> 32:X}/{prev & 0xFFFFFFFF:08X}, desc: ")
        assert line.startswith(head), line
        refs = "".join(f", blkref #{i}: rel {rel}{'' if fork == 'main' else ' fork ' + fork} "
                       f"blk {blk}{' FPW' if img else ''}" for i, rel, fork, blk, img in blocks)
        assert line.endswith(refs), line


def test_cli_filters(walfix: WalFixture, capsys: pytest.CaptureFixture[str]) -> None:
    rows = walfix.rows
    start = rows[100][0]
    assert cli_main(["waldump", "--json", "--rmgr", "heap", "--rmgr", "Transaction",
                     "--start", format_lsn(start), "--limit", "50", str(walfix.dir)]) == 0
    got = _json_rows(capsys.readouterr().out)
    want = [r for r in rows if r[0] >= start and r[3] in ("Heap", "Transaction")][:50]
    assert got == want and len(got) == 50


def test_cli_describes_parsed_records(walfix: WalFixture,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Descriptions carry the parsed fields (checked against the JSON's own block data)."""
    assert cli_main(["waldump", "--json", str(walfix.dir)]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    descs = {o["desc"].split(" ")[0] for o in objs}
    assert {"INSERT", "COMMIT", "RUNNING_XACTS"} <= descs
    assert {o["rmgr"] for o in objs} <= {r.name for r in RMGRS}
    for o in objs:
        if o["rmgr"] == "Heap" and o["desc"].startswith("INSERT "):
            assert o["desc"].split(" ")[1] == "off:"
        if o["rmgr"] == "LogicalMessage":
            assert "prefix \"cdclake." in o["desc"]
        if o["rmgr"] == "Transaction" and o["desc"].startswith("COMMIT "):
            assert " UTC" in o["desc"]


def test_cli_unknown_rmgr_is_a_usage_error(walfix: WalFixture) -> None:
    with pytest.raises(SystemExit) as err:
        cli_main(["waldump", "--rmgr", "nosuch", str(walfix.dir)])
    assert err.value.code == 2


def test_record_running_through_a_whole_segment_into_a_missing_one(wal15: WalFixture) -> None:
    """Regression: a record that fills segment N+1 entirely and continues into an absent N+2
    is the end of the WAL given, not corruption (the reader used to check N+1 for "valid WAL
    after the end" and, finding it, raise WalCorruptError)."""
    size = wal15.segment_size
    big = next(r for r in wal15.rows if r[4] > size)
    assert big[0] // size == wal15.segment_start(wal15.segments[1]) // size
    mine, reader, _ = ours(wal15.segments[:3])  # the record ends in segments[3]
    assert mine == [r for r in wal15.rows if r[0] < big[0]]
    assert "continues past the end of valid WAL" in reader.end_reason
