"""Damaged WAL: every failure is a cdclake WAL error naming the file and the LSN.

Real segments from the fixtures are damaged the ways archives get damaged (a flipped bit, a
short copy, a foreign file, a lost segment) and the reader must stop with an error an operator
can act on, never yield a wrong record, never hang.
"""

from __future__ import annotations

import copy
import random
import struct
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdclake.cli import main as cli_main
from cdclake.errors import (
    WalCorruptError,
    WalError,
    WalGapError,
    WalTruncatedError,
    WalVersionError,
)
from cdclake.lsn import format_lsn
from cdclake.wal.reader import PAGE_SIZE, XLogReader
from cdclake.wal.record import XLogRecord
from cdclake.wal.source import DirectorySource
from cdclake.waldump import describe, record_json_line
from tests.support.pgwaldump import Row, row_from_json, row_of
from tests.unit.wal.conftest import FIXTURES, WalFixture, load_fixture


def _read_all(paths: list[Path] | Path) -> list[object]:
    return list(XLogReader(DirectorySource(paths)))


def _assert_names(err: WalError, path: Path | str, lsn: int) -> None:
    msg = str(err)
    assert str(path) in msg, msg
    assert f"LSN {format_lsn(lsn)}" in msg, msg
    assert err.lsn == lsn


def _one_page_record(fix: WalFixture, seg: Path) -> tuple[int, int]:
    """(lsn, tot_len) of a record of ``seg`` lying inside one page, from the expectations."""
    start = fix.segment_start(seg)
    for lsn, _prev, _xid, _rm, tot, _rec, _blocks in fix.rows:
        if start + PAGE_SIZE <= lsn < start + fix.segment_size and tot >= 64 \
                and lsn % PAGE_SIZE + tot <= PAGE_SIZE:
            return lsn, tot
    raise AssertionError("fixture has no suitable record")


@pytest.mark.parametrize("where", ["body", "header"])
def test_flipped_bit_is_a_crc_error(wal15: WalFixture, where: str) -> None:
    """The CRC covers the record's data and its header up to xl_crc (here xl_xid, which
    nothing else checks)."""
    seg = wal15.segments[1]
    lsn, tot = _one_page_record(wal15, seg)
    data = bytearray(seg.read_bytes())
    data[lsn - wal15.segment_start(seg) + (tot - 3 if where == "body" else 4)] ^= 0x10
    seg.write_bytes(bytes(data))
    got = []
    with pytest.raises(WalCorruptError, match="CRC") as err:
        for rec in XLogReader(DirectorySource(wal15.dir)):
            got.append(row_of(rec))
    _assert_names(err.value, seg, lsn)
    # everything before the damaged record was read and is right
    assert got == [r for r in wal15.rows if r[0] < lsn]


def test_truncated_segment(wal15: WalFixture) -> None:
    seg = wal15.segments[1]
    seg.write_bytes(seg.read_bytes()[:500_000])
    with pytest.raises(WalTruncatedError, match="500000 bytes") as err:
        _read_all(wal15.dir)
    _assert_names(err.value, seg, wal15.segment_start(seg) + 500_000)


def test_truncated_to_nothing(wal15: WalFixture) -> None:
    seg = wal15.segments[0]
    seg.write_bytes(b"")
    with pytest.raises(WalTruncatedError) as err:
        _read_all(wal15.dir)
    assert str(seg) in str(err.value)


def test_wrong_page_magic_mid_stream(wal15: WalFixture) -> None:
    seg = wal15.segments[1]
    page = wal15.segment_start(seg) + 7 * PAGE_SIZE
    data = bytearray(seg.read_bytes())
    struct.pack_into("<H", data, page - wal15.segment_start(seg), 0xD113)
    seg.write_bytes(bytes(data))
    with pytest.raises(WalVersionError, match="0xD113 differs from 0xD110") as err:
        _read_all(wal15.dir)
    _assert_names(err.value, seg, page)


def test_missing_middle_segment(wal15: WalFixture) -> None:
    seg = wal15.segments[1]
    seg.unlink()
    with pytest.raises(WalGapError, match="missing") as err:
        _read_all(wal15.dir)
    assert seg.name in str(err.value)
    assert err.value.lsn == wal15.segment_start(seg)
    assert f"LSN {format_lsn(wal15.segment_start(seg))}" in str(err.value)


def test_random_bytes_file(tmp_path: Path) -> None:
    path = tmp_path / "000000010000000000000007"
    path.write_bytes(random.Random(7).randbytes(1 << 20))
    with pytest.raises(WalCorruptError, match="not a WAL segment") as err:
        _read_all(path)
    _assert_names(err.value, path, 7 << 20)


def test_random_bytes_replacing_a_middle_segment(wal15: WalFixture) -> None:
    """Valid WAL resumes after the garbage, so it cannot be taken for the end of WAL."""
    seg = wal15.segments[1]
    seg.write_bytes(random.Random(11).randbytes(wal15.segment_size))
    with pytest.raises(WalError) as err:
        _read_all(wal15.dir)
    assert isinstance(err.value, (WalCorruptError, WalVersionError))
    _assert_names(err.value, seg, wal15.segment_start(seg))


def test_cli_reports_corruption_and_exits_2(wal15: WalFixture,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    seg = wal15.segments[1]
    lsn, tot = _one_page_record(wal15, seg)
    data = bytearray(seg.read_bytes())
    data[lsn - wal15.segment_start(seg) + tot - 3] ^= 0x01
    seg.write_bytes(bytes(data))
    assert cli_main(["waldump", str(wal15.dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cdclake waldump: error: incorrect CRC-32C")
    assert str(seg) in err and format_lsn(lsn) in err


# --- fuzzing ---------------------------------------------------------------------------------

def _fixture_segment() -> tuple[str, bytes, list[Row]]:
    """(file name, bytes, pg_waldump's records) of the PG18 fixture segment, in memory."""
    import json

    import zstandard

    dctx = zstandard.ZstdDecompressor()
    src = FIXTURES / "pg18"
    (seg,) = sorted(src.glob("0*.zst"))
    doc = json.loads(dctx.decompress((src / "expected.json.zst").read_bytes(),
                                     max_output_size=1 << 30))
    return seg.name[:-4], dctx.decompress(seg.read_bytes(), max_output_size=1 << 30), \
        [row_from_json(r) for r in doc["records"]]


_NAME, _BASE, _EXPECTED = _fixture_segment()
_N = len(_BASE)
_mutation = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, _N - 1), st.integers(0, 7)),
                                        min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, _N - 1)),
    st.tuples(st.just("splice"), st.tuples(st.integers(0, _N - 1), st.integers(0, _N - 1),
                                           st.integers(1, 3 * PAGE_SIZE))),
    st.tuples(st.just("zero"), st.tuples(st.integers(0, _N - 1), st.integers(1, 4 * PAGE_SIZE))),
)
#: Seconds one mutated segment may take: an unmutated one reads in well under a second.
_BOUND = 10.0


def _mutate(kind: str, arg: object) -> bytes:
    data = bytearray(_BASE)
    if kind == "flip":
        for pos, bit in arg:  # type: ignore[attr-defined]
            data[pos] ^= 1 << bit
    elif kind == "truncate":
        del data[arg:]  # type: ignore[misc]
    elif kind == "splice":  # copy a run of the segment over another place (a misplaced write)
        src, dst, n = arg  # type: ignore[misc]
        chunk = data[src:src + n]
        data[dst:dst + len(chunk)] = chunk
        del data[_N:]
    else:
        at, n = arg  # type: ignore[misc]
        data[at:at + n] = bytes(min(n, _N - at))
    return bytes(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(_mutation)
@pytest.mark.timeout(300)
def test_mutated_segment_never_hangs_or_crashes(tmp_path: Path,
                                                mutation: tuple[str, object]) -> None:
    """Any damage ends in records or a WAL error, never a wrong record: what the reader yields
    before it stops is a prefix of what pg_waldump read from the undamaged segment."""
    path = tmp_path / _NAME
    path.write_bytes(_mutate(*mutation))
    t0 = time.monotonic()
    got: list[Row] = []
    try:
        reader = XLogReader(DirectorySource(path))
        for rec in reader:
            got.append(row_of(rec))
            describe(rec, reader.version)
            record_json_line(rec, reader.version)
            assert time.monotonic() - t0 < _BOUND
    except WalError:
        pass
    assert time.monotonic() - t0 < _BOUND
    assert got == _EXPECTED[:len(got)], mutation


def _sample_records() -> list[XLogRecord]:
    """One record of each (rmgr, opcode) the PG15 fixture holds: the parsers' real inputs."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        fix = load_fixture(15, Path(tmp))
        seen: dict[tuple[int, int], XLogRecord] = {}
        for rec in XLogReader(DirectorySource(fix.dir)):
            rec.main_data = bytes(rec.main_data)
            for b in rec.blocks:
                b.data = None if b.data is None else bytes(b.data)
            seen.setdefault((rec.rmid, rec.info & 0xF0), rec)
    return list(seen.values())


_RECORDS = _sample_records()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_RECORDS), st.binary(max_size=256), st.integers(0, 2), st.data())
def test_parsers_reject_garbage_with_wal_errors(rec: XLogRecord, garbage: bytes, where: int,
                                                data: st.DataObject) -> None:
    """Past the CRC, a body the parsers cannot read must be WalCorruptError, not a crash.

    (A CRC match over a wrong layout is what a reader bug or an unsupported server version
    looks like.) ``where``: replace the main data, cut it short, or replace block 0's data.
    """
    fake = copy.copy(rec)
    fake.blocks = [copy.copy(b) for b in rec.blocks]
    md = bytes(rec.main_data)
    if where == 0:
        fake.main_data = garbage
    elif where == 1:
        fake.main_data = md[:data.draw(st.integers(0, max(len(md) - 1, 0)))]
    elif fake.blocks:
        fake.blocks[0].data = garbage or None
    try:
        text = describe(fake, 15)
    except WalCorruptError as exc:
        assert exc.lsn == rec.lsn
    else:
        assert isinstance(text, str) and text
