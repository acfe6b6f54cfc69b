"""ALTER TYPE ... RENAME VALUE: mirror values follow their enum oid to its current label."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from cdclake.lake import labels
from cdclake.lake.apply import Counts, MirrorState, apply_changes
from cdclake.lake.batch import read_batch
from cdclake.lake.changes import prepare
from tests.support.streamgen import Stream, relation


def test_translation_follows_oids() -> None:
    old = {2: {"10": "sad", "11": "ok"}, 3: {"10": "sad"}}
    new = {2: {"10": "blue", "11": "ok", "12": "new"}}
    assert labels.translation(old, new) == {2: {"sad": "blue"}}
    swapped = labels.translation({2: {"1": "a", "2": "b"}}, {2: {"1": "b", "2": "a"}})
    values: dict[int, Any] = {1: 5, 2: ["a", None, "b"]}
    labels.relabel(values, swapped)
    assert values == {1: 5, 2: ["b", None, "a"]}


def test_rows_before_a_rename_take_the_new_label(stream: Stream) -> None:
    plain = relation("t", [("id", pa.int32()), ("m", pa.string())], key=["id"])
    before = dataclasses.replace(plain, enums={"m": {10: "sad", 11: "ok"}})
    after = dataclasses.replace(plain.evolve(0x2000), enums={"m": {10: "blue", 11: "ok"}})
    b = stream.batch("b")
    with b.txn() as t:
        t.insert(before, {"id": 1, "m": "sad"})
        t.insert(before, {"id": 2, "m": "ok"})
    with b.txn() as t:
        t.insert(after, {"id": 3, "m": "blue"})
        t.delete(after, {"id": 2})
    b.write()
    (tc,) = list(read_batch(stream.root, "b"))
    prepared = prepare(tc, "b")
    assert prepared.labels == {2: {"10": "blue", "11": "ok"}}
    state = MirrorState([], "public.t")
    apply_changes(state, prepared.changes, Counts())
    assert sorted(r.values[2] for r in state.rows()) == ["blue", "blue"]
