"""Open transactions carried to the next batch: their bytes stored, restored exactly."""

from __future__ import annotations

from pathlib import Path

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.decoding.carry import OpenTxn, restore_open, save_open
from cdclake.decoding.changes import INSERT, Change
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.spill import encode_change
from cdclake.decoding.walclass import PgClassRow, PgClassUpdate
from cdclake.wal.record import RelFileLocator, WalTuple

LOC = RelFileLocator(1663, 5, 20000)


def _change(lsn: int) -> Change:
    return Change(INSERT, lsn, 0, LOC, None, WalTuple(2, 0, 24, b"\x01" * 40), True, 0)


def _stream(buffer: ReorderBuffer, xid: int, subxids: list[int]) -> list[bytes]:
    members = buffer.members(xid, subxids)
    return [encode_change(c) for c in ReorderBuffer.merged_changes(members)]


def test_open_transactions_round_trip_through_the_store(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    before = ReorderBuffer(600, tmp_path / "spill-a", 1 << 20)  # small: some changes spill
    before.assign_child(10, 11, 100)
    for lsn in range(100, 2000, 100):
        before.queue(10 if lsn % 200 else 11, _change(lsn))
    before.txn(10, 100).ddl.append((150, b'{"kind": "relations"}'))
    before.txn(11, 100).ddl.append((250, PgClassRow(20001, "pg_temp_16400", 20002, 1663, "r",
                                                    "p")))
    # pg_class rows updated (TRUNCATE: bytes of the new relfilenode; a whole row) and deleted
    updates = [(260, PgClassUpdate((0, 7), (0, 8), filenode=(0x21, None, 0x40, None))),
               (270, PgClassUpdate((3, 1), (4, 2), row=PgClassRow(20003, "t", 20004, 1663, "r",
                                                                  "p"))),
               (280, PgClassUpdate((4, 2), None))]
    before.txn(11, 100).ddl.extend(updates)
    before.txn(12, 300).prepared = True  # owned by the other partition
    assert before.spilled_changes > 0
    expected = _stream(before, 10, [11])

    layout = Layout()

    def put(xid: int, first_lsn: int, path: Path) -> str:
        key = layout.spill_key("000002-x", xid, first_lsn, generation=1)
        store.put_file(key, path)
        return key

    saved = save_open(before, lambda xid: xid != 12, put)
    assert sorted(t.xid for t in saved) == [10, 11]
    assert all(t.spill and store.exists(t.spill) for t in saved)
    as_json = [OpenTxn.from_json(t.to_json()) for t in saved]
    assert as_json == saved

    after = ReorderBuffer(600, tmp_path / "spill-b", 1 << 20)
    restore_open(after, as_json, lambda xid: True, store.get_file, tmp_path / "spill-b")
    assert _stream(after, 10, [11]) == expected
    assert after.txn(11, 0).top == 10 and after.txn(10, 0).subxids == [11]
    assert after.txn(10, 0).ddl == [(150, b'{"kind": "relations"}')]
    assert isinstance(after.txn(11, 0).ddl[0][1], PgClassRow)
    assert after.txn(11, 0).ddl[1:] == updates
    # changes queued in the new batch come after the restored ones
    after.queue(10, _change(5000))
    assert [c.lsn for c in ReorderBuffer.merged_changes(after.members(10, [11]))][-1] == 5000

    # a partition that does not own the transaction keeps its bookkeeping, not its changes
    other = ReorderBuffer(600, tmp_path / "spill-c", 1 << 20)
    restore_open(other, as_json, lambda xid: False, store.get_file, tmp_path / "spill-c")
    assert other.txn(10, 0).ddl and not other.txn(10, 0).spill_files


def test_spilled_and_restored_changes_are_private(tmp_path: Path) -> None:
    """Spill files hold row values: readable by this user only, in a 0700 directory."""
    buffer = ReorderBuffer(1, tmp_path / "spill", 1 << 20)
    buffer.queue(10, _change(100))
    files = list((tmp_path / "spill").iterdir())
    assert files and all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert (tmp_path / "spill").stat().st_mode & 0o777 == 0o700
    store = LocalStore(tmp_path / "store")
    carried: list[int] = []

    def put(xid: int, lsn: int, path: Path) -> str:
        carried.append(path.stat().st_mode & 0o777)
        store.put_file("k", path)
        return "k"

    saved = save_open(buffer, lambda xid: True, put)
    assert carried == [0o600]  # the file a transaction is carried in, too
    assert sorted((tmp_path / "spill").iterdir()) == sorted(files)  # and it is gone
    after = ReorderBuffer(1, tmp_path / "restored", 1 << 20)
    restore_open(after, saved, lambda xid: True, store.get_file, tmp_path / "restored")
    (restored,) = (tmp_path / "restored").iterdir()
    assert restored.stat().st_mode & 0o777 == 0o600
    assert [c.lsn for c in after.txn(10, 0).stream()] == [100]
