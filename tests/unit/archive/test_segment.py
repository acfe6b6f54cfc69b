"""verify_segment: a file enters the archive only if its first page says it is that segment."""

from __future__ import annotations

import pytest

from cdclake.archive.segment import XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER, verify_segment
from cdclake.errors import WalCorruptError, WalTruncatedError, WalVersionError
from cdclake.lsn import SegmentName
from tests.support.walfiles import MB, SYSID, segment_bytes

NAME = "000000010000000000000005"


@pytest.mark.parametrize("version", [15, 16, 17, 18])
def test_a_good_segment_of_each_version(version: int) -> None:
    seg, hdr = verify_segment(NAME, segment_bytes(1, 5, version=version))
    assert seg == SegmentName(1, 5)
    assert (hdr.pg_version, hdr.system_id, hdr.segment_size, hdr.pageaddr) == (
        version, SYSID, MB, 5 * MB)


def test_segment_size_comes_from_the_header_not_a_default() -> None:
    # 16 MiB segments: segno 0x105 is named ...00000001 00000005 (256 per 4 GiB)
    data = segment_bytes(1, 0x105, segsize=16 * MB)
    seg, hdr = verify_segment("000000010000000100000005", data)
    assert (seg.segno, hdr.segment_size) == (0x105, 16 * MB)


def test_continuation_flag_on_the_first_page_is_fine() -> None:
    verify_segment(NAME, segment_bytes(1, 5, info=XLP_LONG_HEADER | XLP_FIRST_IS_CONTRECORD))


def test_first_segment_of_a_new_timeline_has_the_parent_on_its_first_page() -> None:
    seg, hdr = verify_segment("000000020000000000000005", segment_bytes(2, 5, page_tli=1))
    assert (seg.timeline, hdr.timeline) == (2, 1)


def test_partial_file_is_checked_like_its_segment() -> None:
    seg, _ = verify_segment(NAME + ".partial", segment_bytes(1, 5))
    assert seg.partial


def test_half_copied_file_is_truncated() -> None:
    with pytest.raises(WalTruncatedError, match=rf"524288 bytes.*1048576 \(segment {NAME}\)"):
        verify_segment(NAME, segment_bytes(1, 5)[: MB // 2])
    with pytest.raises(WalTruncatedError, match="too short"):
        verify_segment(NAME, b"\x10\xd1")


def test_unknown_page_magic_names_the_versions_we_read() -> None:
    with pytest.raises(WalVersionError, match=r"0xD10D.*0xD110=15.*0xD118=18"):
        verify_segment(NAME, segment_bytes(1, 5, magic=0xD10D))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pageaddr": 4 * MB}, r"first page address 0/400000 does not match .* 0/500000"),
    ({"info": 0}, "long header"),
    ({"info": XLP_LONG_HEADER | 0x8}, "info flags 0x000A"),
    ({"page_tli": 3}, "timeline 3, the file name says 1"),
    ({"blcksz": 16384}, "block size 16384"),
])
def test_files_that_are_not_the_named_segment(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(WalCorruptError, match=message):
        verify_segment(NAME, segment_bytes(1, 5, **kwargs))


def test_bad_segment_size_in_header() -> None:
    data = bytearray(segment_bytes(1, 5))
    data[32:36] = (3 * MB).to_bytes(4, "little")
    with pytest.raises(WalCorruptError, match="segment size 3145728"):
        verify_segment(NAME, bytes(data))


def test_name_that_cannot_exist_at_this_segment_size() -> None:
    # with 1 MiB segments the low part of the name goes up to 0xFFF only
    data = segment_bytes(1, 0x1000 - 1)
    with pytest.raises(WalCorruptError, match="does not fit"):
        verify_segment("000000010000000000001000", data)


def test_file_longer_than_its_segment() -> None:
    with pytest.raises(WalCorruptError, match="more than the segment size"):
        verify_segment(NAME, segment_bytes(1, 5) + b"\0")
