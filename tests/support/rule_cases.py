"""The cases the merge's rules (:mod:`cdclake.lake.rules`) are evaluated on in every dialect:
each engine must decide every case as the Python dialect does."""

from __future__ import annotations

import itertools
import random
from typing import Any

from cdclake.decoding import stream
from cdclake.lake import rules

_KEYS = [(1, "a"), (1, "b"), (2, "a"), (None, None)]
_EVENTS = [(op, *old, *new) for op in (stream.OP_INSERT, stream.OP_UPDATE, stream.OP_DELETE,
                                       stream.OP_TRUNCATE)
           for old in _KEYS for new in _KEYS[:3]]
_ORDERS = [(*a, *b) for a, b in itertools.product(
    itertools.product((10, 20), (5, 6), (0, 1)), repeat=2)]

#: a case: an event's op, old key (two columns; None: not logged) and new key, and two
#: positions in the stream's order (commit LSN, LSN, seq), every way they can compare
COLUMNS = ("op", "old_a", "old_b", "new_a", "new_b", "c1", "l1", "s1", "c2", "l2", "s2")
CASES = [(*e, *o) for e in _EVENTS for o in _ORDERS]


def decide(d: rules.Dialect, case: list[Any]) -> dict[str, Any]:
    """Every rule, in dialect ``d``, of ``case`` (its :data:`COLUMNS`: values, arrays or
    columns)."""
    op, old_a, old_b, new_a, new_b, *order = case
    return {"sets": rules.sets(d, op),
            "key_changed": rules.key_changed(d, [old_a, old_b], [new_a, new_b]),
            "takes": rules.takes(d, op, [old_a, old_b], [new_a, new_b]),
            "before": rules.before(d, order[:3], order[3:]),
            "looks_up": rules.looks_up(d, op),
            "looked_up": rules.looked_up(d, d.present(old_b), old_b, new_b)}


def python_decisions() -> list[dict[str, Any]]:
    """What the Python dialect decides of every case."""
    return [decide(rules.PY, list(c)) for c in CASES]


#: an event of a batch, as the merges' frames hold them: its key (two columns), its place in
#: the stream's order, whether it sets the key's row or takes it, a column's value and
#: whether the change left that column unchanged (TOAST)
EVENT_COLUMNS = ("k1", "k2", *rules.ORDER, "sets", "v", "unchanged")


def events(seed: int = 7, keys: int = 12, per_key: int = 9) -> list[tuple[Any, ...]]:
    """Per key, a history a table can have — a row inserted (or already in the mirror),
    updated (some updates leaving the column unchanged, some setting it null), deleted and
    inserted again — the keys' events interleaved in the stream's order, where several
    changes share a commit and a multi-insert's rows share an LSN; in no particular order."""
    rng = random.Random(seed)
    places = sorted(rng.sample(list(itertools.product(
        range(100, 100 + keys * per_key // 2), (0, 16, 32), (0, 1))), keys * per_key))
    turns = [k for k in range(keys) for _ in range(per_key)]
    rng.shuffle(turns)  # whose event takes each place, in order
    exists = [rng.random() < 0.5 for _ in range(keys)]
    out = []
    for k, place in zip(turns, places, strict=True):
        sets = not exists[k] or rng.random() < 0.8
        unchanged = sets and exists[k] and rng.random() < 0.5
        out.append((k % 4, "abc"[k // 4], *place, sets, rng.choice(["x", "y", None]),
                    unchanged))
        exists[k] = sets
    rng.shuffle(out)
    return out


def replayed(batch: list[tuple[Any, ...]]) -> tuple[dict[tuple[Any, ...], tuple[Any, bool]],
                                                    dict[tuple[Any, Any], tuple[Any, ...]]]:
    """The two frame rules' sequential form, as the replay applies changes: walking the
    events in the stream's order, each event's column value once carried and whether it is
    still unchanged (the mirror's row then has it), by event; and each key's last event."""
    carried: dict[tuple[Any, ...], tuple[Any, bool]] = {}
    row: dict[tuple[Any, Any], Any] = {}  # a key's row in the batch: its value
    last: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    for event in sorted(batch, key=lambda e: e[2:5]):
        key, sets, value, unchanged = event[:2], *event[5:]
        if sets and unchanged and key in row:
            value, unchanged = row[key], False
        if sets and not unchanged:
            row[key] = value
        elif not sets:
            row.pop(key, None)
        carried[event] = (value, unchanged)
        last[key] = event
    return carried, last
