"""The two custom expectations' row rules, and their configuration checks."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from cdclake.quality import inputs
from cdclake.quality.gx_expectations import (
    ExpectChangesToCarryReplicaIdentity,
    ExpectCompoundColumnsToBeIncreasingWithinGroups,
    carries_identity,
    increasing_within_groups,
)
from tests.support.quality_builders import BIG


def _order(rows: list[tuple[int, int, int]], strictly: bool = True) -> list[bool]:
    frame = pd.DataFrame(rows, columns=["_commit_lsn", "_lsn", "_seq"])
    return increasing_within_groups(frame, ["_commit_lsn"], strictly).tolist()


def test_rows_compare_only_with_their_own_group() -> None:
    # two interleaved transactions, each in order by itself
    assert _order([(1, 10, 0), (2, 5, 0), (1, 11, 0), (2, 6, 0)]) == [True] * 4


def test_the_row_that_goes_back_is_the_one_reported() -> None:
    assert _order([(1, 10, 0), (1, 12, 0), (1, 11, 0), (1, 13, 0)]) == [True, True, False, True]


def test_order_is_lexicographic_over_lsn_then_seq() -> None:
    assert _order([(1, 10, 2), (1, 11, 0), (1, 11, 1), (1, 11, 1), (1, 11, 0)]) == [
        True, True, True, False, False]
    assert _order([(1, 10, 0), (1, 10, 0)], strictly=False) == [True, True]


def test_lsns_past_float_precision_still_compare_exactly() -> None:
    assert _order([(BIG, BIG + 1, 0), (BIG, BIG, 0)]) == [True, False]


@pytest.fixture(params=["objects", "arrow"])
def old_keys(request: pytest.FixtureRequest) -> str:
    """How the frame holds ``_old_key``: Python dicts (a chunk whose keys are filled from
    exact texts) or an Arrow struct (every other chunk, :func:`inputs.to_frame`)."""
    return str(request.param)


def _identity(rows: list[tuple[str, object, object]], ident: str, held: str,
              keys: tuple[str, ...] = ("id",)) -> list[bool]:
    if held == "objects":
        frame = pd.DataFrame(rows, columns=["_op", "_old_key", "id"])
    else:
        table = pa.table({"_op": [r[0] for r in rows],
                          "_old_key": pa.array([r[1] for r in rows],
                                               pa.struct([("id", pa.int64())])),
                          "id": pa.array([r[2] for r in rows], pa.int64())})
        frame = inputs.to_frame(table, table.column_names)
        assert isinstance(frame["_old_key"].dtype, pd.ArrowDtype)
    return carries_identity(frame, "_op", "_old_key", list(keys), ident).tolist()


def test_default_identity_rules(old_keys: str) -> None:
    rows = [
        ("I", None, 1),            # inserts need nothing
        ("T", None, None),         # nor truncates
        ("U", None, 1),            # key kept: the new row identifies it
        ("U", {"id": 1}, 2),       # key changed: old key logged
        ("D", {"id": 1}, None),    # delete: old key
        ("D", None, None),         # delete without old key
        ("D", {"id": None}, None),  # old key with a null key column
        ("U", None, None),         # update, no old key, null new key
        ("U", {"id": None}, 3),    # an old key that is there must be complete
    ]
    assert _identity(rows, "d", old_keys) == [True, True, True, True, True, False, False,
                                              False, False]
    assert _identity(rows, "i", old_keys) == _identity(rows, "d", old_keys)


def test_an_old_key_without_a_key_column_is_incomplete() -> None:
    table = pa.table({"_op": ["D", "I"],
                      "_old_key": pa.array([{"other": 1}, None],
                                           pa.struct([("other", pa.int64())])),
                      "id": pa.array([None, 2], pa.int64())})
    for frame in (table.to_pandas(), inputs.to_frame(table, table.column_names)):
        assert carries_identity(frame, "_op", "_old_key", ["id"], "d").tolist() == [False, True]


def test_full_identity_needs_the_old_row_whatever_its_values(old_keys: str) -> None:
    rows = [("U", {"id": 1}, 1), ("U", None, 1), ("D", {"id": None}, None), ("D", None, None),
            ("I", None, 1)]
    assert _identity(rows, "f", old_keys, keys=()) == [True, False, True, False, True]


def test_nothing_identity_counts_every_update_and_delete(old_keys: str) -> None:
    rows = [("I", None, 1), ("U", None, 1), ("D", None, None), ("T", None, None)]
    assert _identity(rows, "n", old_keys, keys=()) == [True, False, False, True]


def test_group_must_be_part_of_the_columns_and_leave_something_to_order() -> None:
    with pytest.raises(ValueError, match="group_by must be a non-empty subset"):
        ExpectCompoundColumnsToBeIncreasingWithinGroups(column_list=["a", "b"], group_by=["c"])
    with pytest.raises(ValueError, match="at least one column outside group_by"):
        ExpectCompoundColumnsToBeIncreasingWithinGroups(column_list=["a", "b"],
                                                        group_by=["a", "b"])


def test_identity_expectation_needs_its_columns_and_keys() -> None:
    with pytest.raises(ValueError, match=r"column_list must include \['id'\]"):
        ExpectChangesToCarryReplicaIdentity(column_list=["_op", "_old_key"],
                                            key_columns=["id"], replica_identity="d")
    with pytest.raises(ValueError, match="d/i needs key_columns"):
        ExpectChangesToCarryReplicaIdentity(column_list=["_op", "_old_key"],
                                            replica_identity="d")
