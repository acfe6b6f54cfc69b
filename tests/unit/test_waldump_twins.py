"""The compiled ``cdclake waldump`` line (``describe`` and ``record_json_line``: ``waldump.py``
compiled as itself) against the module run by Python: on every record of the committed WAL
fixtures of PostgreSQL 15 and 18, and on records made malformed or unusual from them (cut
short, other flags, every commit shape, timestamps at the edges of four-digit years, unknown
rmgrs and forks, non-ASCII descriptions). The same text, or the same error. No server."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdclake import _waldump, native, waldump  # type: ignore[attr-defined]
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import RM_HEAP_ID, RM_LOGICALMSG_ID, RM_XACT_ID, XLogRecord
from cdclake.wal.rmgr import heap, xact
from cdclake.wal.source import DirectorySource
from tests.unit.wal.conftest import VERSIONS, load_fixture

Format = Callable[[XLogRecord, int], str]
with native.use_python():
    PYTHON_DESCRIBE: Format = waldump.describe
    PAIRS: tuple[tuple[Format, Format], ...] = (
        (_waldump.describe, waldump.describe),
        (_waldump.record_json_line, waldump.record_json_line),
    )
#: µs from PostgreSQL's epoch to 10000-01-01: the first time strftime's %Y prints five digits
YEAR_10000 = 252455616000000000


def _outcome(fn: Format, rec: XLogRecord, version: int) -> object:
    try:
        return fn(rec, version)
    except Exception as exc:  # the error itself is compared
        return type(exc), str(exc)


def _assert_agree(rec: XLogRecord, version: int) -> str:
    """Both implementations' text (or error) for ``rec``; returns the reference's."""
    for fast, reference in PAIRS:
        want = _outcome(reference, rec, version)
        assert _outcome(fast, rec, version) == want, (rec, want)
    return str(_outcome(PYTHON_DESCRIBE, rec, version))


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def records(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[XLogRecord]]:
    fix = load_fixture(request.param, tmp_path_factory.mktemp(f"wal{request.param}"))
    return fix.version, list(XLogReader(DirectorySource(fix.dir)))


def test_every_fixture_record_formats_the_same(records: tuple[int, list[XLogRecord]]) -> None:
    version, recs = records
    assert len(recs) > 1000
    written_here = 0
    for rec in recs:
        _assert_agree(rec, version)
        written_here += rec.rmid == RM_HEAP_ID and rec.info & 0x70 in (0x00, 0x10, 0x20, 0x40)
    assert written_here > 100, "the fixture holds the heap records the twin writes itself"


def _first(recs: list[XLogRecord], rmid: int, op: int, mask: int = 0x70) -> XLogRecord:
    return next(r for r in recs if r.rmid == rmid and r.info & mask == op)


def _variants(rec: XLogRecord) -> Iterator[XLogRecord]:
    """``rec`` cut short at every length, with every flag byte, with its block data cut."""
    md = bytes(rec.main_data)
    for n in range(len(md) + 1):
        yield dataclasses.replace(rec, main_data=md[:n])
    flag_at = 2 if rec.info & 0x70 == heap.XLOG_HEAP_INSERT else 7
    for flags in range(256):
        yield dataclasses.replace(rec, main_data=md[:flag_at] + bytes([flags]) + md[flag_at + 1:])
    blk = rec.blocks[0]
    data = bytes(blk.data or b"")
    for n in range(min(len(data), 8) + 1):
        yield dataclasses.replace(rec, blocks=[dataclasses.replace(blk, data=data[:n])])
    yield dataclasses.replace(rec, blocks=[])
    yield dataclasses.replace(rec, main_data=memoryview(md + md)[::2])  # not contiguous


def test_heap_records_cut_short_or_flagged_otherwise(records: tuple[int, list[XLogRecord]],
                                                     ) -> None:
    version, recs = records
    update = _first(recs, RM_HEAP_ID, heap.XLOG_HEAP_UPDATE)
    # the fixtures hold no DELETE: one made of an UPDATE's header, with an old key tuple
    delete = dataclasses.replace(update, info=heap.XLOG_HEAP_DELETE,
                                 main_data=bytes(update.main_data[:7]) + b"\x04" + bytes(9))
    for rec in (_first(recs, RM_HEAP_ID, heap.XLOG_HEAP_INSERT), update, delete,
                _first(recs, RM_HEAP_ID, heap.XLOG_HEAP_HOT_UPDATE)):
        for variant in _variants(rec):
            _assert_agree(variant, version)
    assert _assert_agree(delete, version).startswith("DELETE xmax: ")


def _commit(base: XLogRecord, us: int, xinfo: int | None, tail: bytes = b"") -> XLogRecord:
    md = struct.pack("<q", us)
    info = xact.XLOG_XACT_COMMIT
    if xinfo is not None:
        info |= xact.XLOG_XACT_HAS_INFO
        md += struct.pack("<I", xinfo)
    return dataclasses.replace(base, info=info, main_data=md + tail)


def test_commits_of_every_shape_and_time(records: tuple[int, list[XLogRecord]]) -> None:
    version, recs = records
    base = _first(recs, RM_XACT_ID, xact.XLOG_XACT_COMMIT)
    times = (0, 1, 999_999, 86_400_000_000 * 59 + 1, 789_012_345_678_901, -1, -86_400_000_001,
             YEAR_10000 - 1, YEAR_10000, 2**63 - 1, -(2**63))
    texts = set()
    for us in times:
        for xinfo in (None, 0, xact.XACT_XINFO_HAS_DBINFO):
            rec = _commit(base, us, xinfo, struct.pack("<II", 5, 1663))
            texts.add(_assert_agree(rec, version))
    assert "COMMIT 2000-01-01 00:00:00.000000 UTC" in texts
    assert "COMMIT 9999-12-31 23:59:59.999999 UTC" in texts
    # every other xinfo bit, and every length the layout can be cut to
    tail = struct.pack("<IIiI", 5, 1663, 1, 777) + bytes(64)
    for bit in range(12):
        for cut in (0, 4, 8, 12, len(tail)):
            _assert_agree(_commit(base, 1, 1 << bit, tail[:cut]), version)
    for n in range(14):
        _assert_agree(dataclasses.replace(_commit(base, 1, 1, tail),
                                          main_data=_commit(base, 1, 1, tail).main_data[:n]),
                      version)


def test_unknown_rmgrs_forks_and_non_ascii_text(records: tuple[int, list[XLogRecord]]) -> None:
    version, recs = records
    rec = _first(recs, RM_HEAP_ID, heap.XLOG_HEAP_INSERT)
    _assert_agree(dataclasses.replace(rec, rmid=200), version)  # a custom rmgr
    _assert_agree(dataclasses.replace(rec, info=0xF0 | (rec.info & 0x0F)), version)
    blk = rec.blocks[0]
    for fork in (1, 2, 3, 4, 9):
        _assert_agree(dataclasses.replace(rec, blocks=[dataclasses.replace(blk, fork=fork)]),
                      version)
    image = dataclasses.replace(blk, image=bytes(100), id=3)
    _assert_agree(dataclasses.replace(rec, blocks=[blk, image]), version)
    prefix = "préfixe \"quoted\" \\ \x01".encode()
    msg = struct.pack("<I?xxxQQ", 5, True, len(prefix) + 1, 3) + prefix + b"\0" + b"abc"
    text = _assert_agree(dataclasses.replace(rec, rmid=RM_LOGICALMSG_ID, info=0, blocks=[],
                                             main_data=msg), version)
    assert "préfixe" in text


def test_the_waldump_command_writes_the_same_lines(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI, as users run it: the same output from both implementations."""
    from cdclake import native
    from cdclake.cli import main as cli_main

    fix = load_fixture(15, tmp_path / "pg15")
    outputs = []
    for python in (False, True):
        with native.use_python(python):
            for args in (["--json"], []):
                assert cli_main(["waldump", *args, str(fix.dir)]) == 0
                outputs.append(capsys.readouterr().out)
    assert outputs[:2] == outputs[2:]
    assert len(outputs[0].splitlines()) == len(fix.rows)


def test_truncates_with_their_flags(records: tuple[int, list[XLogRecord]]) -> None:
    """A TRUNCATE's flags are named as pg_waldump names them (the compiled describe once took
    them for the C integer its heap records keep)."""
    version, recs = records
    rec = _first(recs, RM_HEAP_ID, heap.XLOG_HEAP_INSERT)
    texts = [_assert_agree(dataclasses.replace(
        rec, info=heap.XLOG_HEAP_TRUNCATE, blocks=[],
        main_data=struct.pack("<IIB3x2I", 5, 2, flags, 16384, 16390)), version)
        for flags in range(4)]
    assert texts[0] == "TRUNCATE nrelids: 2, relids: 16384 16390"
    assert texts[3] == "TRUNCATE flags: CASCADE RESTART_SEQS, nrelids: 2, relids: 16384 16390"
