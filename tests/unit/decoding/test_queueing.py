"""Whose a decoded change is, and what queueing it does (decoding/queueing.py), in both builds:
the Python module the Python Decoder calls, and its compiled twin the compiled decoder asks."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from cdclake.decoding.changes import ELSEWHERE, INSERT, Change
from cdclake.decoding.decode import DecodeStats
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.wal.record import RelFileLocator, WalTuple
from tests.support.twins import no_twin  # noqa: F401 - both builds asked by name: runs once

LOC = RelFileLocator(1663, 5, 16384)


def _compiled() -> ModuleType:
    try:
        return importlib.import_module("cdclake.decoding._queueing")
    except ImportError:
        pytest.skip("cdclake's compiled modules are not built here (no C compiler at install)")


@pytest.fixture(params=["python", "compiled"])
def queueing(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "compiled":
        return _compiled()
    return importlib.import_module("cdclake.decoding.queueing")


def decoder(*, owns: object = None, share: object = None, skip_before: int = 0) -> SimpleNamespace:
    return SimpleNamespace(rb=ReorderBuffer(1 << 20, Path("/nonexistent"), 1 << 24), owns=owns,
                           share=share, skip_before=skip_before, stats=DecodeStats())


def change(lsn: int) -> Change:
    return Change(INSERT, lsn, 0, LOC, None, WalTuple(1, 0, 24, b"\x01\x00\x00\x00"), True, 0)


def test_a_subtransaction_is_foreign_by_its_top_level_transaction(queueing: ModuleType) -> None:
    d = decoder(owns=lambda top: top == 700)
    d.rb.assign_child(700, 701, 10)
    assert not queueing.foreign(d, 700) and not queueing.foreign(d, 701)
    assert queueing.foreign(d, 800)
    assert not queueing.foreign(decoder(), 800)  # no owns: every transaction is this one's


def test_a_change_counts_where_its_share_says(queueing: ModuleType) -> None:
    asked: list[tuple[int, int]] = []

    def share(top: int, lsn: int) -> bool:
        asked.append((top, lsn))
        return lsn % 2 == 0

    d = decoder(share=share)
    d.rb.assign_child(700, 701, 10)
    assert queueing.mine(d, 701, 20) and not queueing.mine(d, 701, 21)
    assert asked == [(700, 20), (700, 21)]  # asked by the top-level xid
    assert queueing.mine(decoder(), 701, 21)


def test_a_change_before_the_start_is_only_counted_as_cut(queueing: ModuleType) -> None:
    d = decoder(share=lambda top, lsn: lsn != 150, skip_before=200)
    queueing.queue_change(d, 700, 100, change(100))
    queueing.queue_change(d, 700, 150, change(150))  # another worker's: not counted here
    assert d.rb.by_txn == {} and d.stats.cut_before_start == 1 and d.stats.changes == 0
    queueing.queue_change(d, 700, 300, change(300))
    queueing.queue_change(d, 700, 400, change(400), 0)  # the caller knew: not this one's
    assert [c.lsn for c in d.rb.by_txn[700].changes] == [300, 400]
    assert d.stats.changes == 1 and d.rb.size > 0


def test_rows_another_worker_emits_leave_placeholders_only_beside_toast_chunks(
        queueing: ModuleType) -> None:
    d = decoder(share=lambda top, lsn: lsn == 50, skip_before=100)
    assert not queueing.elsewhere(d, 700, 50, 0, LOC)  # its own: not elsewhere
    assert queueing.elsewhere(d, 700, 60, 0, LOC) and d.rb.by_txn == {}  # before the start
    assert queueing.elsewhere(d, 700, 200, 0, LOC, 3)
    assert d.rb.by_txn[700].changes == []  # entered, nothing queued: no TOAST pending
    d.rb.by_txn[700].toast_pending = True
    assert queueing.elsewhere(d, 700, 300, 7, LOC, 3, True)
    held = d.rb.by_txn[700].changes
    assert [(c.action, c.lsn, c.seq, c.clear_toast, c.origin) for c in held] == [
        (ELSEWHERE, 300, 0, False, 7), (ELSEWHERE, 300, 1, False, 7),
        (ELSEWHERE, 300, 2, True, 7)]
    assert d.stats.changes == 0  # placeholders are no one's changes
