"""The merge's rules (cdclake.lake.rules), each written once: what they decide, and that the
Arrow dialect (the columnar merge's) decides every case as the Python one (the replay's), and
a batch's last event per key as the replay's sequential walk does. The Spark dialect is held
to the same cases beside a Spark session (tests/e2e/lake/test_spark_merge.py)."""

from __future__ import annotations

import pyarrow as pa

from cdclake.decoding import stream
from cdclake.lake import rules
from tests.support.rule_cases import CASES, COLUMNS, decide, events, python_decisions, replayed


def test_the_rules_decide_as_the_merge_promises() -> None:
    one = {(c[0], c[1:3], c[3:5]): d for c, d in zip(CASES, python_decisions(), strict=True)}
    u, d, i = stream.OP_UPDATE, stream.OP_DELETE, stream.OP_INSERT
    assert one[(i, (None, None), (1, "a"))]["sets"] and one[(u, (1, "a"), (1, "a"))]["sets"]
    assert not one[(d, (1, "a"), (1, "a"))]["sets"]
    assert one[(d, (1, "a"), (1, "a"))]["takes"]  # a DELETE takes its old key
    assert one[(u, (1, "a"), (1, "b"))]["takes"]  # an UPDATE that moved the key, too
    assert one[(u, (1, "a"), (2, "a"))]["key_changed"]
    assert not one[(u, (1, "a"), (1, "a"))]["takes"]  # one that kept it does not
    assert not one[(u, (None, None), (1, "b"))]["takes"]  # nor one whose old key is unlogged
    assert not one[(i, (1, "a"), (2, "a"))]["takes"]
    assert one[(u, (1, "a"), (1, "b"))]["looks_up"] and one[(d, (1, "a"), (1, "b"))]["looks_up"]
    assert not one[(i, (1, "a"), (1, "b"))]["looks_up"]
    assert one[(u, (1, "a"), (1, "b"))]["looked_up"] == "a"  # by the old key, when logged
    assert one[(u, (None, None), (1, "b"))]["looked_up"] == "b"  # else by the new one
    positions = sorted({c[5:8] for c in CASES})
    for c in CASES:
        assert rules.before(rules.PY, c[5:8], c[8:]) == (positions.index(c[5:8])
                                                         < positions.index(c[8:]))


def test_arrow_decides_every_case_as_python() -> None:
    table = pa.table(list(zip(*CASES, strict=True)), names=list(COLUMNS))
    got = decide(rules.ARROW, [table.column(c) for c in COLUMNS])
    want = python_decisions()
    for rule, column in got.items():
        assert column.to_pylist() == [w[rule] for w in want], rule
    assert all(len({w[r] for w in want}) > 1 for r in got)  # no rule decides one way only


def test_arrow_finds_each_keys_last_event_as_the_replay_does() -> None:
    """On a rank in the stream's order, as the columnar merge's events carry it (``_ev``:
    2 × rank, + 1 for an event that sets the row)."""
    ends = set()
    for seed in (7, 8):
        batch = events(seed)
        _carried, last = replayed(batch)
        ev = {e: 2 * i + e[5] for i, e in enumerate(sorted(batch, key=lambda e: e[2:5]))}
        frame = pa.table({"k1": [e[0] for e in batch], "_ev": [ev[e] for e in batch],
                          "k2": [e[1] for e in batch]})
        got = rules.last_per_key(rules.ARROW, frame, ["k1", "k2"], ("_ev",))
        assert got.column_names == frame.column_names
        assert sorted(got.to_pylist(), key=lambda r: (r["k1"], r["k2"])) == [
            {"k1": k[0], "_ev": ev[e], "k2": k[1]} for k, e in sorted(last.items())]
        ends |= {e[5] for e in last.values()}
    assert ends == {True, False}  # some keys end set, some taken
