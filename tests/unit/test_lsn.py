"""LSN notation, segment file names, timelines and .history files (access/xlog_internal.h)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdclake.errors import WalError
from cdclake.lsn import (
    DEFAULT_SEGMENT_SIZE,
    SegmentName,
    check_segment_size,
    format_lsn,
    parse_history,
    parse_lsn,
    parse_segment_name,
    segment_name,
    segno_of,
    timeline_of_lsn,
)

MB = 1 << 20


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_lsn_round_trip(lsn: int) -> None:
    text = format_lsn(lsn)
    assert parse_lsn(text) == lsn
    hi, lo = text.split("/")
    assert int(hi, 16) == lsn >> 32 and int(lo, 16) == lsn & 0xFFFFFFFF
    assert text == text.upper() and (lo == "0" or not lo.startswith("0"))


def test_lsn_examples() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn(" 0/1500800 ") == 0x1500800
    assert parse_lsn("0/1a") == 0x1A
    assert format_lsn(0) == "0/0"


@pytest.mark.parametrize("bad", ["", "0", "0/", "/1", "1/2/3", "G/0", "123456789/0", "0x1/0"])
def test_lsn_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not an LSN"):
        parse_lsn(bad)


@pytest.mark.parametrize("size", [MB, 16 * MB, 64 * MB, 1 << 30])
@given(data=st.data(), tli=st.integers(1, 0xFFFFFFFF))
def test_segment_name_round_trip(size: int, data: st.DataObject, tli: int) -> None:
    segno = data.draw(st.integers(min_value=0, max_value=(1 << 64) // size - 1))
    name = segment_name(tli, segno, size)
    assert len(name) == 24
    per = (1 << 32) // size
    assert name == f"{tli:08X}{segno // per:08X}{segno % per:08X}"
    parsed = parse_segment_name(name, size)
    assert parsed == SegmentName(tli, segno)
    assert parsed.start_lsn(size) == segno * size
    assert segno_of(parsed.start_lsn(size) + size - 1, size) == segno
    assert parse_segment_name(name + ".partial", size).partial


def test_segment_name_depends_on_size() -> None:
    # LSN 1/0 is segment 256 with 16 MiB segments, 4096 with 1 MiB ones: same file name
    assert segment_name(1, (1 << 32) // DEFAULT_SEGMENT_SIZE) == "000000010000000100000000"
    assert segment_name(1, (1 << 32) // MB, MB) == "000000010000000100000000"
    with pytest.raises(ValueError, match="does not fit"):
        parse_segment_name("000000010000000000000100", DEFAULT_SEGMENT_SIZE)
    assert parse_segment_name("000000010000000000000100", MB).segno == 256


@pytest.mark.parametrize("bad", ["00000001000000000000000", "00000001000000000000000g",
                                 "000000010000000000000001.history", "x" * 24])
def test_segment_name_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_segment_name(bad)


@pytest.mark.parametrize("size", [0, MB - 1, 3 * MB, 2 << 30])
def test_segment_size_must_be_power_of_two_1mb_1gb(size: int) -> None:
    with pytest.raises(WalError):
        check_segment_size(size)


HISTORY = """# comment
1\t0/3000160\tno recovery target specified

2\t0/5000000\tbefore 2026-01-01 00:00:00+00
"""


def test_history_parsing_and_timeline_of_lsn() -> None:
    hist = parse_history(HISTORY, "00000003.history")
    assert [(h.parent, h.switch_lsn) for h in hist] == [(1, 0x3000160), (2, 0x5000000)]
    assert hist[0].reason == "no recovery target specified"
    assert timeline_of_lsn(hist, 3, 0x3000000) == 1
    assert timeline_of_lsn(hist, 3, 0x3000160) == 2
    assert timeline_of_lsn(hist, 3, 0x4FFFFFF) == 2
    assert timeline_of_lsn(hist, 3, 0x5000000) == 3


@pytest.mark.parametrize("text", ["1\tnot-an-lsn\treason", "x\t0/1\t", "2\t0/1\n1\t0/2\n"])
def test_history_rejects_malformed(text: str) -> None:
    with pytest.raises(WalError) as err:
        parse_history(text, "00000004.history")
    assert "00000004.history" in str(err.value)
