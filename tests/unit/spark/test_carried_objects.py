"""The objects of transactions open across batches: kept while a committed progress names
them, removed once none does, and never a later batch's."""

from __future__ import annotations

from pathlib import Path

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.decoding.carry import OpenTxn
from cdclake.spark.job import _clear_carried


def test_only_earlier_batches_objects_nothing_carries_are_removed(tmp_path: Path) -> None:
    store, layout = LocalStore(tmp_path), Layout("streams/a")
    keys = {(batch, xid): layout.spill_key(batch, xid, 0x100, generation=1)
            for batch in ("000001-000000010000000000000001", "000002-000000010000000000000002",
                          "000003-000000010000000000000003")
            for xid in (10, 11)}
    for key in keys.values():
        store.put(key, b"x")
    store.put("streams/a/spill/not-a-batch/x.spill", b"x")
    first, second, later = sorted({b for b, _ in keys})
    # batch 2 committed: xid 10 is still open, carried by what batches 1 and 2 stored
    carried = [OpenTxn(10, 0, 0x100, (), False, "", (), (keys[first, 10], keys[second, 10]), 2)]
    _clear_carried(store, layout, 2, carried)
    left = {i.key for i in store.list(layout.spill_root())}
    assert left == {keys[first, 10], keys[second, 10], keys[second, 11],  # its own batch's
                    keys[later, 10], keys[later, 11],  # a later run's, being written
                    "streams/a/spill/not-a-batch/x.spill"}
