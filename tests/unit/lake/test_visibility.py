"""The snapshot handoff rule: skip exactly the transactions the snapshot saw."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdclake.catalog.export import parse_pg_snapshot
from cdclake.errors import LakeError, SourceError
from cdclake.lake.rules import ARROW, PY
from cdclake.lake.visibility import (
    PROPERTY,
    SnapshotFacts,
    facts_of,
    in_snapshot,
    property_value,
    visible,
    widen,
)

EPOCH = 1 << 32


def facts(xmin: int, xmax: int, xip: tuple[int, ...], end_lsn: int = 1000) -> SnapshotFacts:
    return SnapshotFacts("00000003-00000002-1", 900, end_lsn, xmin, xmax, xip, 0)


def test_widen_within_one_epoch() -> None:
    assert widen(PY, 700, 750) == 700
    assert widen(PY, 800, 750) == 800


def test_widen_across_an_epoch_boundary() -> None:
    # the snapshot is just past the wrap: old xids belong to the previous epoch
    ref = 5 * EPOCH + 10
    assert widen(PY, 0xFFFF_FFF0, ref) == 4 * EPOCH + 0xFFFF_FFF0
    assert widen(PY, 3, ref) == 5 * EPOCH + 3
    # the snapshot is just before the wrap: new xids belong to the next epoch
    ref = 5 * EPOCH + 0xFFFF_FFF0
    assert widen(PY, 5, ref) == 6 * EPOCH + 5
    assert widen(PY, 0xFFFF_FF00, ref) == 5 * EPOCH + 0xFFFF_FF00


def test_visibility_follows_postgres() -> None:
    f = facts(100, 110, (100, 104))
    assert visible(PY, f, 99)  # committed before every running one
    assert not visible(PY, f, 100)  # running
    assert visible(PY, f, 103)  # between xmin and xmax, not running: committed
    assert not visible(PY, f, 104)
    assert not visible(PY, f, 110)  # started after the snapshot
    assert not visible(PY, f, 5000)


def test_in_snapshot_uses_the_wal_xid_and_commit_lsn() -> None:
    e = 7 * EPOCH
    f = facts(e + 100, e + 110, (e + 100, e + 104), end_lsn=1000)
    assert f.in_snapshot(500, 103)  # committed and seen: already in the copy
    assert not f.in_snapshot(500, 104)  # committed before end_lsn, running in the snapshot
    assert not f.in_snapshot(1500, 100)  # open across the snapshot, committed later
    assert not f.in_snapshot(1000, 103)  # at end_lsn or later: committed after the snapshot
    assert not f.in_snapshot(1500, 50)  # a later epoch's transaction reusing a low xid


def test_in_snapshot_across_the_wrap() -> None:
    e = 3 * EPOCH
    # xmin in the old epoch, xmax in the new one
    f = facts(e - 20, e + 5, (e - 20, e + 2))
    assert f.in_snapshot(10, 0xFFFF_FFF0)  # e - 16: committed before the wrap
    assert not f.in_snapshot(10, 0xFFFF_FFEC)  # e - 20: running
    assert f.in_snapshot(10, 3)  # e + 3: committed after the wrap, before the snapshot
    assert not f.in_snapshot(10, 2)  # e + 2: running
    assert not f.in_snapshot(10, 6)  # e + 6: after the snapshot


def test_round_trip_and_parse() -> None:
    f = facts(*parse_pg_snapshot("4294967400:4294967410:4294967400,4294967404"))
    assert f.xip == (4294967400, 4294967404)
    assert facts_of({PROPERTY: property_value(f)}, "public.t") == f
    assert facts_of({}, "public.t") is None
    with pytest.raises(LakeError, match=r"public\.t"):
        facts_of({PROPERTY: "{"}, "public.t")
    with pytest.raises(SourceError):
        parse_pg_snapshot("1:2")


@pytest.mark.parametrize("base", [7 * EPOCH, 5 * EPOCH - 20, 5 * EPOCH + 0xFFFF_FFF0 - 100])
def test_in_snapshot_over_arrow_columns_is_the_same_rule(base: int) -> None:
    f = facts(base + 100, base + 110, (base + 100, base + 104), end_lsn=1000)
    xids = [(base + d) % EPOCH for d in range(-300, 300)] + [0, 3, 0xFFFF_FFFF]
    lsns = [500, 999, 1000, 1500]
    rows = [(lsn, x) for lsn in lsns for x in xids]
    got = in_snapshot(ARROW, f, pa.array([r[0] for r in rows], pa.int64()),
                      pa.array([r[1] for r in rows], pa.int64())).to_pylist()
    assert got == [f.in_snapshot(lsn, x) for lsn, x in rows]
    assert any(got) and not all(got)
