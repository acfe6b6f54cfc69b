"""Open transactions carried to the next batch: their bytes stored, restored exactly."""

from __future__ import annotations

from pathlib import Path

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.decoding.carry import OpenTxn, restore_open, save_open
from cdclake.decoding.changes import INSERT, TRUNCATE, Change, Truncate
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.spill import encode_change, read_changes
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

    def put(xid: int, first_lsn: int, part: int | None, path: Path) -> str:
        key = layout.spill_key("000002-x", xid, first_lsn, generation=1, part=part)
        store.put_file(key, path)
        return key

    saved = save_open(before, lambda xid: xid != 12, put)
    assert sorted(t.xid for t in saved) == [10, 11]
    # spilled bytes copied as they are, the rest encoded: every change counted once
    assert {t.xid: t.changes for t in saved} == {
        x: len(list(before.by_txn[x].stream())) for x in (10, 11)}
    assert all(len(t.spill) == 1 and store.exists(t.spill[0]) for t in saved)
    as_json = [OpenTxn.from_json(t.to_json()) for t in saved]
    assert as_json == saved

    after = ReorderBuffer(600, tmp_path / "spill-b", 1 << 20)
    restore_open(after, as_json, lambda o: True, store.get_file, tmp_path / "spill-b")
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
    restore_open(other, as_json, lambda o: False, store.get_file, tmp_path / "spill-c")
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

    def put(xid: int, lsn: int, part: int | None, path: Path) -> str:
        carried.append(path.stat().st_mode & 0o777)
        store.put_file("k", path)
        return "k"

    saved = save_open(buffer, lambda xid: True, put)
    assert carried == [0o600]  # the file a transaction is carried in, too
    assert sorted((tmp_path / "spill").iterdir()) == sorted(files)  # and it is gone
    after = ReorderBuffer(1, tmp_path / "restored", 1 << 20)
    restore_open(after, saved, lambda o: True, store.get_file, tmp_path / "restored")
    assert list((tmp_path / "restored").iterdir()) == []  # fetched when it streams
    stream = after.txn(10, 0).stream()
    first = next(stream)
    (restored,) = (tmp_path / "restored").iterdir()
    assert restored.stat().st_mode & 0o777 == 0o600
    assert [first.lsn, *(c.lsn for c in stream)] == [100]
    assert list((tmp_path / "restored").iterdir()) == []  # and removed once read


def _truncate(lsn: int) -> Change:
    return Change(TRUNCATE, lsn, 0, None, None, None, False, 0,
                  payload=Truncate((20000,), False, False))


def test_a_split_transaction_is_carried_in_parts_and_reunited(tmp_path: Path) -> None:
    """Two decoders hold disjoint stripes of transaction 10 and both the TRUNCATE at 250
    (every part buffers it). Each carries its part (its own key); one that stays split takes
    back its own part, one that owns the transaction when it no longer is split takes both,
    merged by LSN with the TRUNCATE once."""
    store = LocalStore(tmp_path / "store")
    layout = Layout()

    def put(xid: int, first_lsn: int, part: int | None, path: Path) -> str:
        key = layout.spill_key("000002-x", xid, first_lsn, generation=1, part=part)
        store.put_file(key, path)
        return key

    saved: list[OpenTxn] = []
    for part, lsns in ((0, [100, 300, 500]), (1, [200, 400])):
        buffer = ReorderBuffer(200, tmp_path / f"spill-{part}", 1 << 20)  # some spill
        for lsn in sorted([*lsns, 250]):
            buffer.queue(10, _truncate(lsn) if lsn == 250 else _change(lsn))
        saved += save_open(buffer, lambda xid: True, put, lambda top, p=part: (p, 2, 0))
    assert [(o.part, o.parts, o.changes) for o in saved] == [(0, 2, 4), (1, 2, 3)]
    assert saved[0].spill != saved[1].spill and saved[1].spill[0].endswith("-p1.spill")
    assert [OpenTxn.from_json(o.to_json()) for o in saved] == saved

    mine = ReorderBuffer(600, tmp_path / "mine", 1 << 20)
    restore_open(mine, saved, lambda o: o.part == 1, store.get_file, tmp_path / "mine")
    assert [c.lsn for c in mine.txn(10, 0).stream()] == [200, 250, 400]

    whole = ReorderBuffer(600, tmp_path / "whole", 1 << 20)
    restore_open(whole, saved, lambda o: True, store.get_file, tmp_path / "whole")
    t = whole.txn(10, 0)
    assert [(c.action, c.lsn) for c in t.stream()] == [
        (INSERT, 100), (INSERT, 200), (TRUNCATE, 250), (INSERT, 300), (INSERT, 400),
        (INSERT, 500)]
    assert t.nspilled == 6 and list((tmp_path / "whole").iterdir()) == [t.spill_files[-1]]


def test_a_transaction_open_across_batches_stores_what_each_batch_added(tmp_path: Path) -> None:
    """Batch after batch, the changes a transaction was restored with stay in the store
    under their keys; each batch stores only its own changes (a bulk load open across many
    batches is not written again in each), and a batch that adds none stores nothing."""
    store = LocalStore(tmp_path / "store")
    stored: list[list[int]] = []  # the LSNs of the changes each put held

    def put(xid: int, first_lsn: int, part: int | None, path: Path) -> str:
        stored.append([c.lsn for c in read_changes(path)])
        key = f"spill/{len(stored):06d}/xid-{xid}.spill"
        store.put_file(key, path)
        return key

    carried: list[OpenTxn] = []
    lsns: list[int] = []
    for batch, added in enumerate([range(100, 1000, 100), range(1000, 1500, 100), range(0),
                                   range(1500, 1700, 100)]):
        buffer = ReorderBuffer(300, tmp_path / f"spill-{batch}", 1 << 20)  # some spill
        restore_open(buffer, carried, lambda o: True, store.get_file, tmp_path / f"spill-{batch}")
        for lsn in added:
            buffer.queue(10, _change(lsn))
        lsns += added
        carried = [OpenTxn.from_json(o.to_json()) for o in save_open(buffer, lambda x: True, put)]
        assert carried[0].changes == len(lsns)
        assert len(carried[0].spill) == len(stored)
    assert stored == [list(range(100, 1000, 100)), list(range(1000, 1500, 100)),
                      list(range(1500, 1700, 100))]
    last = ReorderBuffer(300, tmp_path / "last", 1 << 20)
    restore_open(last, carried, lambda o: True, store.get_file, tmp_path / "last")
    assert [c.lsn for c in ReorderBuffer.merged_changes(last.members(10, []))] == lsns
    last.discard(10)
    assert list((tmp_path / "last").iterdir()) == []


def test_a_progress_written_before_lists_carries_its_one_object() -> None:
    old = {"xid": 10, "top": 0, "first_lsn": 100, "subxids": [], "prepared": False, "gid": "",
           "ddl": [], "spill": "spill/000001-x/g1/xid-10-lsn-0-64.spill", "changes": 3}
    assert OpenTxn.from_json(old).spill == ("spill/000001-x/g1/xid-10-lsn-0-64.spill",)
    assert OpenTxn.from_json({**old, "spill": None, "changes": 0}).spill == ()
