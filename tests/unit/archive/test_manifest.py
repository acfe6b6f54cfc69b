"""Manifest entries and the stream identity: JSON round trip, conflicts, listings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.archive.gaps import Gap, GapKind
from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.manifest import Manifest, ManifestEntry, SystemInfo
from cdclake.archive.push import push_wal_file
from cdclake.archive.segment import verify_segment
from cdclake.errors import ArchiveConflictError, ManifestError
from cdclake.lsn import SegmentName
from tests.support.walfiles import MB, SYSID, history_text, segment_bytes, sha


def entry_for(tli: int, segno: int, *, salt: bytes = b"",
              shipped_at: str = "2025-01-01T00:00:00+00:00",
              shipped_by: str = "ship") -> ManifestEntry:
    name = SegmentName(tli, segno).name(MB)
    data = segment_bytes(tli, segno, salt=salt)
    seg, hdr = verify_segment(name, data)
    return ManifestEntry.for_segment(seg, hdr, sha256=sha(data), key=f"wal/{name}",
                                     compressed=False, stored_size=len(data),
                                     shipped_by=shipped_by, shipped_at=shipped_at)


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    return Manifest(LocalStore(tmp_path / "store"), Layout())


def test_entry_fields_and_json_round_trip() -> None:
    e = entry_for(1, 0x123)
    assert (e.segment, e.timeline, e.segno, e.size) == ("000000010000000000000123", 1, 0x123, MB)
    assert (e.first_lsn, e.end_lsn) == (0x123 * MB, 0x124 * MB)
    obj = json.loads(e.to_json())
    # LSNs as PostgreSQL prints them; the 64-bit system id as text (JSON numbers are doubles)
    assert (obj["first_lsn"], obj["end_lsn"], obj["system_id"]) == (
        "0/12300000", "0/12400000", str(SYSID))
    assert ManifestEntry.from_json(e.to_json(), "x") == e


@pytest.mark.parametrize("mutate", [
    lambda o: o.pop("sha256"),
    lambda o: o.update(first_lsn="nonsense"),
    lambda o: o.update(segno=7),
])
def test_invalid_entries_name_the_object(mutate) -> None:  # type: ignore[no-untyped-def]
    obj = json.loads(entry_for(1, 3).to_json())
    mutate(obj)
    with pytest.raises(ManifestError, match=r"manifest entry s3://b/m\.json is not valid"):
        ManifestEntry.from_json(json.dumps(obj).encode(), "s3://b/m.json")
    with pytest.raises(ManifestError, match="not valid"):
        ManifestEntry.from_json(b"{not json", "s3://b/m.json")


def test_record_keeps_the_first_shipment_of_the_same_bytes(manifest: Manifest) -> None:
    first = manifest.record(entry_for(1, 3, shipped_by="wal-push"))
    again = manifest.record(entry_for(1, 3, shipped_at="2030-01-01T00:00:00+00:00"))
    assert again == first and again.shipped_by == "wal-push"
    assert manifest.get("000000010000000000000003") == first
    assert manifest.get("000000010000000000000004") is None


def test_record_of_different_bytes_is_a_conflict_naming_both_checksums(
        manifest: Manifest) -> None:
    first = manifest.record(entry_for(1, 3))
    other = entry_for(1, 3, salt=b"another primary")
    with pytest.raises(ArchiveConflictError) as exc:
        manifest.record(other)
    assert "000000010000000000000003" in str(exc.value)
    assert first.sha256 in str(exc.value) and other.sha256 in str(exc.value)
    assert "multiple primaries" in str(exc.value)
    assert manifest.get("000000010000000000000003") == first


def test_stream_identity_is_pinned_by_the_first_segment(manifest: Manifest) -> None:
    info = SystemInfo(SYSID, 15, MB)
    assert manifest.system() is None
    assert manifest.ensure_system(info, "seg1") == info
    assert manifest.ensure_system(info, "seg2") == info
    assert manifest.system() == info
    with pytest.raises(ArchiveConflictError, match=r"segment seg3 is from system 42 .*"
                       rf"archives system {SYSID}"):
        manifest.ensure_system(SystemInfo(42, 15, MB), "seg3")
    with pytest.raises(ArchiveConflictError, match="PostgreSQL 18"):
        manifest.ensure_system(SystemInfo(SYSID, 18, MB), "seg4")


def test_names_and_segments_come_from_one_listing(manifest: Manifest) -> None:
    for tli, segno in [(2, 5), (1, 4), (1, 5), (1, 3)]:
        manifest.record(entry_for(tli, segno))
    manifest.ensure_system(SystemInfo(SYSID, 15, MB), "x")  # not an entry
    assert manifest.names() == ["000000010000000000000003", "000000010000000000000004",
                                "000000010000000000000005", "000000020000000000000005"]
    assert manifest.segments(MB) == [SegmentName(1, 3), SegmentName(1, 4), SegmentName(1, 5),
                                     SegmentName(2, 5)]
    assert [e.segment for e in manifest.entries()] == manifest.names()


def test_the_segment_holding_an_lsn_is_on_the_newest_timeline(manifest: Manifest) -> None:
    assert manifest.segment_holding(5 * MB) is None  # nothing shipped: decode what there is
    for tli, segno in [(1, 4), (1, 5), (2, 5)]:
        manifest.record(entry_for(tli, segno))
    manifest.ensure_system(SystemInfo(SYSID, 15, MB), "x")
    assert manifest.segment_holding(4 * MB + 100) == "000000010000000000000004"
    assert manifest.segment_holding(5 * MB) == "000000020000000000000005"
    assert manifest.segment_holding(6 * MB - 1) == "000000020000000000000005"
    assert manifest.segment_holding(6 * MB) is None


def test_gaps_for_status_read_history_from_the_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    manifest = Manifest(store, Layout())
    assert manifest.gaps() == []  # nothing archived yet
    for tli, segno in [(1, 1), (1, 2), (2, 3), (2, 5)]:
        push_wal_file(store, Layout(), SegmentName(tli, segno).name(MB),
                      segment_bytes(tli, segno, page_tli=1 if segno == 3 else None))
    assert manifest.gaps() == [Gap(GapKind.HISTORY, 2, 3, 3, MB)]
    push_wal_file(store, Layout(), "00000002.history", history_text((1, 3 * MB + 8)).encode())
    assert set(manifest.histories([1, 2, 3])) == {2}
    assert manifest.gaps(head_lsn=8 * MB + 100, head_timeline=2) == [
        Gap(GapKind.MISSING, 2, 4, 4, MB), Gap(GapKind.HEAD, 2, 6, 7, MB)]
