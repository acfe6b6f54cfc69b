"""ReorderBuffer: memory accounting, spill of the heaviest transaction, LSN-ordered merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.decoding import spill
from cdclake.decoding.changes import (
    INSERT,
    MESSAGE,
    TOAST_CHUNK,
    TRUNCATE,
    Change,
    Message,
    ToastChunk,
    Truncate,
)
from cdclake.decoding.reorder import ReorderBuffer, clean_spill_dir, xid_precedes
from cdclake.decoding.spill import (
    append_entries,
    encode_change,
    encode_runs,
    read_changes,
    spill_file_name,
)
from cdclake.errors import SpillError
from cdclake.wal.record import RelFileLocator, WalTuple

LOC = RelFileLocator(1663, 5, 16384)
SEG = 1 << 20


def ins(lsn: int, size: int = 10, seq: int = 0) -> Change:
    return Change(INSERT, lsn, seq, LOC, None, WalTuple(3, 0x0802, 24, b"x" * size), True, 0)


def append_changes(path: Path, changes: list[Change]) -> None:
    """``changes``, all of one segment, appended to the spill file at ``path``."""
    ((_segno, count, data),) = encode_runs(changes, 1 << 62)
    assert count == len(changes)
    append_entries(path, data)


def test_spill_file_name_follows_postgres() -> None:
    assert spill_file_name(856, 0x6000000) == "xid-856-lsn-0-6000000.spill"
    assert spill_file_name(7, (0x1 << 32) | 0xA000000) == "xid-7-lsn-1-A000000.spill"


def test_spill_round_trip_every_payload_kind(tmp_path: Path) -> None:
    changes = [
        Change(INSERT, 100, 3, LOC, WalTuple(2, 1, 24, b"old"), WalTuple(3, 2, 32, b"new\0"),
               False, 7),
        Change(TRUNCATE, 200, 0, None, None, None, False, 0, Truncate((16384, 16390), True, False)),
        Change(MESSAGE, 300, 0, None, None, None, False, 0, Message("p", b"\x00\xffc", True)),
        Change(TOAST_CHUNK, 400, 0, LOC, None, None, False, 0, ToastChunk(99, 2, b"chunk")),
    ]
    path = tmp_path / "x.spill"
    append_changes(path, changes[:2])
    append_changes(path, changes[2:])
    back = list(read_changes(path))
    assert [encode_change(c) for c in back] == [encode_change(c) for c in changes]
    assert back[0].old.data == b"old" and back[0].new.t_hoff == 32 and back[0].origin == 7
    assert back[1].payload == Truncate((16384, 16390), True, False)
    assert back[3].payload == ToastChunk(99, 2, b"chunk")


def test_corrupt_spill_file_is_an_error_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "xid-1-lsn-0-0.spill"
    append_changes(path, [ins(10), ins(20)])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(SpillError, match=r"xid-1-lsn-0-0\.spill is corrupt at offset \d+"):
        list(read_changes(path))
    path.write_bytes(bytes(data[:-5]))
    with pytest.raises(SpillError, match=r"corrupt|truncated"):
        list(read_changes(path))


def test_entries_are_the_reference_encoding_in_runs_per_segment_read_back_in_blocks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever implementation runs, an entry is ``encode_change``'s bytes (which the carry
    writes too), a run per segment; read back in blocks smaller than an
    entry, across block ends, and an entry longer than a block."""
    changes = [ins(10, seq=1), ins(SEG - 1, size=3000),
               Change(MESSAGE, SEG + 5, 0, None, None, None, False, 0,
                      Message("p", b"m" * 5000, True)),
               Change(INSERT, SEG + 9, 2, RelFileLocator(1663, 5, 16390),
                      WalTuple(2, 1, 24, b"old"), None, True, 3), ins(SEG + 20)]
    runs = encode_runs(changes, SEG)
    assert [(segno, count) for segno, count, _ in runs] == [(0, 2), (1, 3)]
    assert b"".join(data for *_, data in runs) == b"".join(map(encode_change, changes))
    path = tmp_path / "x.spill"
    for *_, data in runs:
        append_entries(path, data)
    monkeypatch.setattr(spill, "READ_SIZE", 1000)
    back = list(read_changes(path))
    assert [encode_change(c) for c in back] == [encode_change(c) for c in changes]
    assert back[3].locator == RelFileLocator(1663, 5, 16390) and back[4].locator == LOC
    assert back[3].new is None and back[3].old.data == b"old" and back[3].origin == 3


def test_memory_is_bounded_and_the_heaviest_transaction_spills(tmp_path: Path) -> None:
    rb = ReorderBuffer(work_mem=2000, spill_dir=tmp_path, segment_size=SEG)
    for i in range(5):
        rb.queue(1, ins(100 + i, size=50))  # small transaction
    for i in range(12):
        rb.queue(2, ins(1000 + i, size=100))  # heavy one
    assert rb.size <= 2000
    assert rb.by_txn[2].serialized and not rb.by_txn[1].serialized
    assert rb.spilled_txns == 1 and rb.spilled_changes > 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["xid-2-lsn-0-0.spill"]
    merged = list(rb.merged_changes(rb.members(2, [])))
    assert [c.lsn for c in merged] == [1000 + i for i in range(12)]
    rb.discard(2)
    assert not list(tmp_path.iterdir())
    assert rb.size == sum(c.size() for c in rb.by_txn[1].changes)


def test_spill_files_split_by_wal_segment(tmp_path: Path) -> None:
    rb = ReorderBuffer(work_mem=10**9, spill_dir=tmp_path, segment_size=SEG)
    for lsn in (SEG - 8, SEG + 8, 3 * SEG + 16):
        rb.queue(9, ins(lsn))
    rb.spill(rb.by_txn[9])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "xid-9-lsn-0-0.spill", "xid-9-lsn-0-100000.spill", "xid-9-lsn-0-300000.spill"]
    rb.queue(9, ins(3 * SEG + 100))  # after the spill: stays in memory, read after the files
    assert [c.lsn for c in rb.by_txn[9].stream()] == [SEG - 8, SEG + 8, 3 * SEG + 16,
                                                      3 * SEG + 100]


def test_subtransactions_merge_by_lsn_including_spilled_parts(tmp_path: Path) -> None:
    rb = ReorderBuffer(work_mem=10**9, spill_dir=tmp_path, segment_size=SEG)
    rb.queue(10, ins(1))
    rb.assign_child(10, 11, 2)
    rb.queue(11, ins(2))
    rb.queue(10, ins(3))
    rb.queue(11, ins(4))
    rb.spill(rb.by_txn[11])
    rb.queue(11, ins(6))
    rb.queue(10, ins(5))
    rb.assign_child(10, 12, 7)
    rb.queue(12, ins(7))  # an aborted subtransaction: not named by the commit record
    got = [c.lsn for c in rb.merged_changes(rb.members(10, [11]))]
    assert got == [1, 2, 3, 4, 5, 6]
    rb.discard(10, [11])
    assert rb.by_txn == {} and not list(tmp_path.iterdir())


def test_abort_old_drops_crash_leftovers_but_not_prepared(tmp_path: Path) -> None:
    rb = ReorderBuffer(work_mem=10**9, spill_dir=tmp_path, segment_size=SEG)
    for xid in (100, 101, 200):
        rb.queue(xid, ins(xid))
    rb.by_txn[101].prepared = True
    assert rb.abort_old(150) == [100]
    assert set(rb.by_txn) == {101, 200}


def test_xid_precedes_wraps_around() -> None:
    assert xid_precedes(100, 200)
    assert not xid_precedes(200, 100)
    assert xid_precedes(0xFFFFFFF0, 5)  # 5 is newer after wraparound
    assert not xid_precedes(5, 0xFFFFFFF0)


def test_clean_spill_dir_only_removes_spill_files(tmp_path: Path) -> None:
    (tmp_path / "xid-5-lsn-0-1000000.spill").write_bytes(b"")
    (tmp_path / "keep.txt").write_text("x")
    assert clean_spill_dir(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
