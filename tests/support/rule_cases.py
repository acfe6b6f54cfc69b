"""The cases the merge's rules (:mod:`cdclake.lake.rules`) are evaluated on in every dialect:
each engine must decide every case as the Python dialect does."""

from __future__ import annotations

import itertools
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
