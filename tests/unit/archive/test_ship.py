"""ship: order, idempotence, gaps, half-copied files and timelines, over the directory backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.manifest import Manifest
from cdclake.archive.ship import plan_ship, ship
from cdclake.cli import main
from cdclake.config import Config
from cdclake.errors import ArchiveConflictError, ArchiveGapError, WalTruncatedError
from cdclake.lsn import segment_name
from tests.support.walfiles import MB, history_text, segment_bytes, sha, write_segment


def n(tli: int, segno: int) -> str:
    return segment_name(tli, segno, MB)


class RecordingStore(LocalStore):
    """A directory store that remembers the order of successful writes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes: list[str] = []

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        wrote = super().put(key, data, if_absent=if_absent)
        if wrote:
            self.writes.append(key)
        return wrote


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    d = tmp_path / "archive"
    d.mkdir()
    return d


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore(tmp_path / "store")


def shipped(store: LocalStore) -> list[str]:
    return Manifest(store, Layout()).names()


def run(store: LocalStore, archive: Path, **kw: bool):  # type: ignore[no-untyped-def]
    return ship(Config(), archive, store=store, **kw)


def test_ships_in_segment_order_then_a_rerun_ships_nothing(archive: Path,
                                                          store: RecordingStore) -> None:
    for segno in (5, 3, 4, 2):
        write_segment(archive, 1, segno)
    report = run(store, archive)
    assert report.shipped == [n(1, 2), n(1, 3), n(1, 4), n(1, 5)]
    # uploaded several at once, recorded in segment order
    assert sorted(k for k in store.writes if k.startswith("wal/")) == [
        f"wal/{n(1, s)}" for s in (2, 3, 4, 5)]
    assert [k for k in store.writes if k.startswith("manifest/wal/")] == [
        f"manifest/wal/{n(1, s)}.json" for s in (2, 3, 4, 5)]
    for segno in (2, 3, 4, 5):
        assert store.get(f"wal/{n(1, segno)}") == (archive / n(1, segno)).read_bytes()
        entry = Manifest(store, Layout()).get(n(1, segno))
        assert entry is not None and entry.shipped_by == "ship"
        assert entry.sha256 == sha((archive / n(1, segno)).read_bytes())
    store.writes.clear()
    again = run(store, archive)
    assert (again.shipped, again.unchanged, store.writes) == ([], [], [])
    assert again.plan.already == [n(1, s) for s in (2, 3, 4, 5)]


def test_gap_stops_before_the_missing_segment_and_resumes_after_restore(
        archive: Path, store: RecordingStore, tmp_path: Path) -> None:
    for segno in range(1, 7):
        write_segment(archive, 1, segno)
    held = tmp_path / n(1, 3)
    (archive / n(1, 3)).rename(held)
    with pytest.raises(ArchiveGapError) as exc:
        run(store, archive)
    msg = str(exc.value)
    assert f"WAL segment {n(1, 3)} is missing" in msg
    assert "shipped 2 file(s) before it and nothing past it" in msg
    assert n(1, 4) in msg  # names what is waiting behind the gap
    assert shipped(store) == [n(1, 1), n(1, 2)]
    assert [o.key for o in store.list("wal/")] == [f"wal/{n(1, 1)}", f"wal/{n(1, 2)}"]
    # the operator restores the segment: the rest ships, in order
    held.rename(archive / n(1, 3))
    report = run(store, archive)
    assert report.shipped == [n(1, s) for s in (3, 4, 5, 6)]
    assert run(store, archive).shipped == []


def test_gap_behind_segments_already_shipped_and_cleaned_up(archive: Path,
                                                           store: RecordingStore) -> None:
    for segno in (1, 2):
        write_segment(archive, 1, segno)
    run(store, archive)
    for p in archive.iterdir():  # the archive directory is cleaned after shipping
        p.unlink()
    write_segment(archive, 1, 4)
    write_segment(archive, 1, 5)
    with pytest.raises(ArchiveGapError, match=f"WAL segment {n(1, 3)} is missing"):
        run(store, archive)
    assert shipped(store) == [n(1, 1), n(1, 2)]
    write_segment(archive, 1, 3)
    assert run(store, archive).shipped == [n(1, 3), n(1, 4), n(1, 5)]


def test_newest_file_still_being_copied_is_left_for_the_next_run(archive: Path,
                                                                store: RecordingStore) -> None:
    for segno in (1, 2):
        write_segment(archive, 1, segno)
    growing = archive / n(1, 3)
    growing.write_bytes(segment_bytes(1, 3)[: MB // 3])
    report = run(store, archive)
    assert report.shipped == [n(1, 1), n(1, 2)]
    assert report.plan.pending == [n(1, 3)]
    assert "still being written" in report.summary()
    growing.write_bytes(segment_bytes(1, 3))
    assert run(store, archive).shipped == [n(1, 3)]


def test_a_file_too_short_for_a_header_alone_is_pending(archive: Path,
                                                       store: RecordingStore) -> None:
    (archive / n(1, 1)).write_bytes(b"")
    report = run(store, archive)
    assert (report.shipped, report.plan.pending) == ([], [n(1, 1)])


def test_truncated_segment_before_others_stops_there(archive: Path,
                                                    store: RecordingStore) -> None:
    for segno in (1, 2, 3, 4):
        write_segment(archive, 1, segno)
    (archive / n(1, 2)).write_bytes(segment_bytes(1, 2)[: MB // 2])
    with pytest.raises(WalTruncatedError, match=n(1, 2)):
        run(store, archive)
    assert shipped(store) == [n(1, 1)]


def test_conflicting_segment_stops_the_run(archive: Path, store: RecordingStore) -> None:
    for segno in (1, 2, 3):
        write_segment(archive, 1, segno)
    store.put(f"wal/{n(1, 2)}", segment_bytes(1, 2, salt=b"old primary"))
    with pytest.raises(ArchiveConflictError, match=n(1, 2)):
        run(store, archive)
    assert shipped(store) == [n(1, 1)]  # nothing recorded past the conflict
    # the upload under way beside the conflicting one (3 segments: all start at once) is
    # completed by the next run, once the conflict is resolved, not uploaded again
    store.delete(f"wal/{n(1, 2)}")
    store.writes.clear()
    report = run(store, archive)
    assert (report.shipped, report.unchanged) == ([n(1, 2)], [n(1, 3)])
    assert shipped(store) == [n(1, 1), n(1, 2), n(1, 3)]


def test_timeline_switch_ships_history_first_and_continues(archive: Path,
                                                          store: RecordingStore) -> None:
    switch = 3 * MB + 0x5000  # timeline 1 ended inside segment 3
    # what a promotion leaves: the old timeline's last segment only as .partial, the new
    # timeline's copy of that segment (its first page still says timeline 1), the history
    for segno in (1, 2):
        write_segment(archive, 1, segno)
    (archive / (n(1, 3) + ".partial")).write_bytes(segment_bytes(1, 3))
    (archive / "00000002.history").write_text(history_text((1, switch)))
    write_segment(archive, 2, 3, page_tli=1)
    write_segment(archive, 2, 4)
    report = run(store, archive)
    assert report.shipped == ["00000002.history", n(1, 1), n(1, 2), n(1, 3) + ".partial",
                              n(2, 3), n(2, 4)]
    assert shipped(store) == [n(1, 1), n(1, 2), n(2, 3), n(2, 4)]
    assert store.writes[0] == "wal/00000002.history"
    assert run(store, archive).shipped == []


def test_an_abandoned_branch_is_refused_and_holds_up_nothing(archive: Path,
                                                             store: RecordingStore) -> None:
    """One archive directory, two servers after a failover: the old primary kept writing
    timeline 1 past the switch point (segments 4 and 5, and its .partial of 5); the new
    primary wrote timeline 2. Ship refuses the old primary's segments as wal-push does, and
    ships timeline 2's, which sort after them, without stopping."""
    switch = 3 * MB + 0x5000
    for segno in (1, 2, 3, 4):
        write_segment(archive, 1, segno)
    (archive / (n(1, 5) + ".partial")).write_bytes(segment_bytes(1, 5))
    write_segment(archive, 1, 5)
    (archive / "00000002.history").write_text(history_text((1, switch)))
    for segno in (3, 4, 5):
        write_segment(archive, 2, segno)
    report = run(store, archive)
    assert report.shipped == ["00000002.history", n(1, 1), n(1, 2), n(1, 3), n(2, 3), n(2, 4),
                              n(2, 5)]
    assert report.plan.abandoned == [n(1, 4), n(1, 5), n(1, 5) + ".partial"]
    assert "refused (WAL of an abandoned timeline branch" in report.summary()
    assert store.head(f"wal/{n(1, 4)}") is None and store.head(f"wal/{n(1, 5)}") is None
    again = run(store, archive)
    assert again.shipped == [] and again.plan.abandoned == report.plan.abandoned


def test_new_timeline_without_its_history_is_held_back(archive: Path,
                                                      store: RecordingStore) -> None:
    for segno in (1, 2):
        write_segment(archive, 1, segno)
    write_segment(archive, 2, 3, page_tli=1)
    with pytest.raises(ArchiveGapError, match=r"00000002\.history is neither in"):
        run(store, archive)
    assert shipped(store) == [n(1, 1), n(1, 2)]
    (archive / "00000002.history").write_text(history_text((1, 3 * MB + 8)))
    assert run(store, archive).shipped == ["00000002.history", n(2, 3)]


def test_history_already_in_the_store_with_other_content_is_a_conflict(
        archive: Path, store: RecordingStore) -> None:
    store.put("wal/00000002.history", history_text((1, 9 * MB)).encode())
    (archive / "00000002.history").write_text(history_text((1, 3 * MB)))
    with pytest.raises(ArchiveConflictError, match=r"00000002\.history"):
        run(store, archive)


def test_dry_run_uploads_nothing(archive: Path, store: RecordingStore) -> None:
    for segno in (1, 2):
        write_segment(archive, 1, segno)
    (archive / "notes.txt").write_text("not WAL")
    report = run(store, archive, dry_run=True)
    assert [f.name for f in report.plan.to_ship] == [n(1, 1), n(1, 2)]
    assert report.plan.ignored == ["notes.txt"]
    assert store.writes == [] and list(store.list()) == []
    assert "would ship 2 file(s)" in report.summary()


def test_compressed_shipping(archive: Path, store: RecordingStore) -> None:
    write_segment(archive, 1, 1)
    run(store, archive, compress=True)
    entry = Manifest(store, Layout()).get(n(1, 1))
    assert entry is not None and entry.compressed and entry.stored_size < MB // 10


def test_plan_uses_the_segment_size_from_the_headers(archive: Path,
                                                    store: RecordingStore) -> None:
    write_segment(archive, 1, 0x105, segsize=16 * MB)
    plan = plan_ship(store, Layout(), archive)
    assert plan.segment_size == 16 * MB
    assert [(f.name, f.segno) for f in plan.to_ship] == [("000000010000000100000005", 0x105)]


def test_cli(archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CDCLAKE_STORE_URL", (tmp_path / "cli-store").as_uri())
    for segno in (1, 2, 4):
        write_segment(archive, 1, segno)
    assert main(["ship", "--from", str(archive), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out.split() == ["would", "ship", n(1, 1), "would", "ship", n(1, 2)]
    assert f"WAL segment {n(1, 3)} is missing" in captured.err
    assert list(LocalStore(tmp_path / "cli-store").list()) == []
    assert main(["ship", "--from", str(archive)]) == 2
    assert shipped(LocalStore(tmp_path / "cli-store")) == [n(1, 1), n(1, 2)]
    write_segment(archive, 1, 3)
    monkeypatch.setenv("CDCLAKE_ARCHIVE_DIR", str(archive))
    assert main(["ship"]) == 0
    assert "shipped 2 file(s)" in capsys.readouterr().err
