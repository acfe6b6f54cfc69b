"""The filtering gates (decoding/filter.py) over the committed fixture: what they drop never
reaches the reorder buffer, and what is left decodes as the slot printed it."""

from __future__ import annotations

from pathlib import Path

from cdclake.decoding.filter import Filter
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.wal.record import RelFileLocator
from tests.unit.decoding.fixture import DecodingFixture, relation_named


def only_table(lines: list[str], table: str, messages_open: bool, *,
               but: bool = False) -> list[str]:
    """The slot's output as a stream publishing only ``table`` (every table ``but`` it): other
    tables' rows go; a transaction left without rows loses its BEGIN/COMMIT (skip-empty-xacts:
    test_decoding opens a transaction at its first row, or, from PostgreSQL 18 on, at its
    first transactional message: ``messages_open``) but keeps its messages."""
    out: list[str] = []
    txn: list[str] = []
    for line in lines:
        if line.startswith("BEGIN"):
            txn = [line]
        elif line.startswith("COMMIT"):
            if any(x.startswith("table ") or (messages_open and x.startswith("message: "))
                   for x in txn):
                out.extend([*txn, line])
            else:
                out.extend(txn[1:])
            txn = []
        elif line.startswith("table ") and line.startswith(f"table {table}:") == but:
            continue
        elif txn:
            txn.append(line)
        else:
            out.append(line)  # a non-transactional message
    return out


def test_a_table_selection_keeps_only_that_table(decfix: DecodingFixture,
                                                 tmp_path: Path) -> None:
    lines, result, _d = decfix.decode(tmp_path / "spill", tables=frozenset({"public.vf"}))
    messages_open = TestDecoding(print, {}, version=decfix.version).messages_open_xact
    expected = only_table(decfix.lines, "public.vf", messages_open)
    assert any(line.startswith("table public.vf: INSERT") for line in expected)
    assert lines == expected
    everything = decfix.decode(tmp_path / "all")[1]
    assert result.stats.changes < everything.stats.changes  # dropped before buffering


def test_an_excluded_table_is_dropped_whatever_the_selection(decfix: DecodingFixture,
                                                              tmp_path: Path) -> None:
    """CDCLAKE_EXCLUDE_TABLES: gate 3 drops the table's changes, alone or beside a selection
    that names it too (the exclusion wins)."""
    messages_open = TestDecoding(print, {}, version=decfix.version).messages_open_xact
    expected = only_table(decfix.lines, "public.vf", messages_open, but=True)
    assert any(line.startswith("table public.vf: INSERT") for line in decfix.lines)
    assert any(line.startswith("table ") for line in expected)
    lines, result, _d = decfix.decode(tmp_path / "spill", exclude=frozenset({"public.vf"}))
    assert lines == expected
    everything = decfix.decode(tmp_path / "all")[1]
    assert result.stats.changes < everything.stats.changes  # dropped before buffering
    named = decfix.decode(tmp_path / "both", tables=frozenset({"public.vf"}),
                          exclude=frozenset({"public.vf"}))[0]
    assert not any(line.startswith("table ") for line in named)


def test_relation_kinds_the_gates_drop(decfix: DecodingFixture, tmp_path: Path) -> None:
    _lines, _result, d = decfix.decode(tmp_path / "spill")
    flt = Filter(d)
    lsn = decfix.end_lsn
    vf = relation_named(d, "public.vf")[-1]
    tx = relation_named(d, "public.tx")[-1]
    assert not flt.drop_locator(RelFileLocator(vf.tablespace, decfix.db_oid, vf.relfilenode),
                                lsn)
    # the deletion of a TOAST chunk (its row's DELETE says everything)
    assert flt.drop_locator(RelFileLocator(tx.tablespace, decfix.db_oid, tx.toast_relfilenode),
                            lsn)
    pg_class = d.pg_class_loc
    assert pg_class is not None
    assert flt.drop_locator(RelFileLocator(pg_class[0], decfix.db_oid, pg_class[1]), lsn)
    # a relfilenode nothing explains yet is let through: commit processing decides
    assert not flt.drop_locator(RelFileLocator(vf.tablespace, decfix.db_oid, 999_999), lsn)
    narrow = Filter(d, tables=frozenset({"public.tx"}))
    assert narrow.drop_locator(RelFileLocator(vf.tablespace, decfix.db_oid, vf.relfilenode),
                               lsn)
    excluded = Filter(d, exclude=frozenset({"public.vf"}))
    assert excluded.drop_locator(RelFileLocator(vf.tablespace, decfix.db_oid, vf.relfilenode),
                                 lsn)
    assert not excluded.keeps_table("public", "vf") and excluded.keeps_table("public", "tx")
    assert Filter(d, local_only=True).origin_ok(0)
    assert not Filter(d, local_only=True).origin_ok(3) and Filter(d).origin_ok(3)


def test_the_verdict_is_decided_once_per_relation_version(decfix: DecodingFixture,
                                                          tmp_path: Path) -> None:
    """Gates 3-4 answer every change: the verdict is remembered per relation version (the
    compiled decoder reads the same memo), and a new version is decided again."""
    d = decfix.decode(tmp_path / "spill")[2]
    flt = Filter(d, tables=frozenset({"public.tx"}))
    vf = relation_named(d, "public.vf")[-1]
    loc = RelFileLocator(vf.tablespace, decfix.db_oid, vf.relfilenode)
    assert flt.drop_locator(loc, decfix.end_lsn)  # not in the selection
    assert flt.verdicts == {id(vf): (vf, True)}
    flt.verdicts[id(vf)] = (vf, False)
    assert not flt.drop_locator(loc, decfix.end_lsn)  # asked again: the memo answers
    flt.verdicts[id(vf)] = (relation_named(d, "public.tx")[-1], False)  # another version's
    assert flt.drop_locator(loc, decfix.end_lsn)
