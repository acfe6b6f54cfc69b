"""The inexact mark (cdclake.lake.inexact): what a merge commit leaves on a mirror."""

from __future__ import annotations

import json

from cdclake.lake import inexact


def test_a_mark_counts_from_the_first_change_not_applied_until_a_commit_replaces_every_row(
        ) -> None:
    assert inexact.marked({}, 0, 0, "b1", cleared=False) is None  # nothing skipped
    first = inexact.marked({}, 3, 0x3000060, "b1", cleared=False)
    assert first is not None
    assert json.loads(first) == {"not_applied": 3, "since_lsn": "0/3000060",
                                 "since_batch": "b1"}
    props = {inexact.PROPERTY: first}
    assert inexact.marked(props, 0, 0, "b2", cleared=False) == first  # it stays
    more = inexact.marked(props, 2, 0x4000000, "b2", cleared=False)
    assert more is not None
    assert json.loads(more) == {"not_applied": 5, "since_lsn": "0/3000060",
                                "since_batch": "b1"}
    # a TRUNCATE or rewrite after the skipped changes replaced every row: the old mark goes
    assert inexact.marked({inexact.PROPERTY: more}, 0, 0, "b3", cleared=True) is None
    again = inexact.marked({inexact.PROPERTY: more}, 1, 0x5000000, "b3", cleared=True)
    assert again is not None and json.loads(again)["not_applied"] == 1


def test_the_warning_names_the_table_the_count_since_when_and_the_way_out() -> None:
    mark = inexact.inexact_of({inexact.PROPERTY: inexact.marked({}, 4, 0x16B3D10, "b1",
                                                                cleared=False) or ""})
    assert mark is not None
    assert inexact.warning("public.events", mark) == (
        "public.events differs from its source since commit LSN 0/16B3D10: 4 UPDATE/DELETE(s) "
        "not applied (the table has no replica identity: no key in the WAL); fix: ALTER TABLE "
        "public.events REPLICA IDENTITY FULL, then cdclake snapshot --tables public.events")
    assert inexact.inexact_of({}) is None
