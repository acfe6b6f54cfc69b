"""StoreSegmentSource: the WAL reader's view of the store (plain and .zst, timelines), what
the manifest says is archived, each segment checked against its recorded sha256."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from cdclake.archive.compress import compress
from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.push import push_wal_file
from cdclake.archive.source import StoreSegmentSource
from cdclake.errors import SegmentDigestError, WalError
from cdclake.lsn import SegmentName
from cdclake.wal.source import SegmentSource
from tests.support.walfiles import MB, history_text, segment_bytes, sha


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    s = LocalStore(tmp_path / "store")
    lay = Layout()
    push_wal_file(s, lay, "000000010000000000000002", segment_bytes(1, 2))
    push_wal_file(s, lay, "000000010000000000000003", segment_bytes(1, 3), compress=True)
    push_wal_file(s, lay, "000000010000000000000004.partial", segment_bytes(1, 4))
    push_wal_file(s, lay, "00000002.history", history_text((1, 4 * MB + 8)).encode())
    push_wal_file(s, lay, "000000020000000000000004", segment_bytes(2, 4, page_tli=1),
                  compress=True)
    return s


def test_lists_full_segments_sorted_by_segno_then_timeline(store: LocalStore) -> None:
    src: SegmentSource = StoreSegmentSource(store)
    assert src.list_segments() == [SegmentName(1, 2), SegmentName(1, 3), SegmentName(2, 4)]


def test_reads_plain_and_compressed_segments(store: LocalStore) -> None:
    src = StoreSegmentSource(store)
    assert src.segment_size() == MB
    assert src.read_segment(SegmentName(1, 2)) == segment_bytes(1, 2)
    assert src.read_segment(SegmentName(1, 3)) == segment_bytes(1, 3)  # without listing first
    src.list_segments()
    assert src.read_segment(SegmentName(2, 4)) == segment_bytes(2, 4, page_tli=1)
    assert src.describe(SegmentName(2, 4)) == store.url("wal/000000020000000000000004.zst")


def test_history(store: LocalStore) -> None:
    src = StoreSegmentSource(store)
    assert src.read_history(2) == history_text((1, 4 * MB + 8))
    assert src.read_history(3) is None


def test_missing_segment_names_segment_and_store(store: LocalStore) -> None:
    with pytest.raises(WalError, match=r"not in the archive at file://.*000000010000000000000009"):
        StoreSegmentSource(store).read_segment(SegmentName(1, 9))


def test_segment_size_without_the_stream_identity(store: LocalStore) -> None:
    store.delete("manifest/system.json")
    assert StoreSegmentSource(store).segment_size() == MB


def test_empty_store_says_so(tmp_path: Path) -> None:
    with pytest.raises(WalError, match="no WAL segments in"):
        StoreSegmentSource(LocalStore(tmp_path / "empty")).list_segments()


def test_source_pickles_for_spark_tasks(store: LocalStore) -> None:
    src = pickle.loads(pickle.dumps(StoreSegmentSource(store)))
    assert src.read_segment(SegmentName(1, 2)) == segment_bytes(1, 2)


# -- every segment read back is the one archived ----------------------------------------------


def _replace(store: LocalStore, key: str, data: bytes) -> None:
    store.delete(key)
    store.put(key, data)


def test_a_damaged_segment_is_refused_naming_both_digests(store: LocalStore) -> None:
    """A flipped byte anywhere — here in a page's filler, which no record CRC would cover — is
    refused on read, plain or compressed: one line naming the segment, the object and the
    sha256 archived and found."""
    src = StoreSegmentSource(store)
    for segno, key, pack in ((2, "wal/000000010000000000000002", bytes),
                             (3, "wal/000000010000000000000003.zst", compress)):
        good = segment_bytes(1, segno)
        bad = bytearray(good)
        bad[5000] ^= 0x01
        _replace(store, key, pack(bytes(bad)))
        with pytest.raises(SegmentDigestError) as err:
            src.read_segment(SegmentName(1, segno))
        msg = str(err.value)
        assert "\n" not in msg
        for part in (store.url(key), f"has sha256 {sha(bytes(bad))}",
                     f"not the {sha(good)} its manifest entry recorded when wal-push archived "
                     "it", f"(segment 00000001000000000000000{segno})"):
            assert part in msg, part
        _replace(store, key, pack(good))
        assert src.read_segment(SegmentName(1, segno)) == good


def test_a_segment_without_its_manifest_entry_is_not_archived(store: LocalStore) -> None:
    """Its push died before writing the entry: not listed, not read (the retry completes it)."""
    store.delete(Layout().manifest_key("000000010000000000000003"))
    src = StoreSegmentSource(store)
    assert src.list_segments() == [SegmentName(1, 2), SegmentName(2, 4)]
    with pytest.raises(WalError, match=r"not in the archive at file://.* \(no manifest entry\) "
                                       r"\(segment 000000010000000000000003\)"):
        src.read_segment(SegmentName(1, 3))
    store.delete("wal/000000010000000000000002")
    with pytest.raises(WalError, match="though its manifest entry says it was archived"):
        src.read_segment(SegmentName(1, 2))
