"""Rows of a table rewrite: the transient heap's inserts reach the plugin's rewrite callback
with the definition the rows have (the one the ALTER's own message gives, later in the same
transaction), never its change callback; test_decoding prints nothing for them."""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import Column, RelationVersion
from cdclake.catalog.signing import new_key, sign
from cdclake.decoding.changes import INSERT, Change, TxnInfo
from cdclake.decoding.filter import Filter
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.reassembly import Replayer
from cdclake.wal.record import RelFileLocator, WalTuple

TABLE, HEAP, HEAP_OID = 16400, 16500, 16501


def _int4(attnum: int, name: str) -> Column:
    return Column(attnum=attnum, name=name, quoted=name, type_oid=23, typmod=-1, attlen=4,
                  attalign="i", attbyval=True)


def _dictionary() -> tuple[Dictionary, RelationVersion, RelationVersion]:
    d = Dictionary()
    before = RelationVersion(oid=TABLE, db_oid=5, tablespace=1663, relfilenode=TABLE,
                             schema="public", name="t", qualified="public.t", relkind="r",
                             persistence="p", replident="d", columns=(_int4(1, "id"),),
                             key_attnums=(1,), valid_from=0x100)
    after = dataclasses.replace(before, columns=(_int4(1, "id"), _int4(2, "n")),
                                valid_from=0x900)  # the ALTER's message, after its rewrite
    d.add_version(before)
    d.add_version(after)
    d.add_rewrite_heap(1663, HEAP, HEAP_OID, TABLE, 0x200)
    return d, before, after


def _row(lsn: int, *values: int) -> Change:
    data = b"\0" + struct.pack(f"<{len(values)}i", *values)  # t_hoff 24: data starts at 1
    return Change(INSERT, lsn, 0, RelFileLocator(1663, 5, HEAP), None,
                  WalTuple(len(values), 0, 24, data), True, 0)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, ...]] = []

    def begin(self, txn: TxnInfo) -> None:
        pass

    def commit(self, txn: TxnInfo) -> None:
        pass

    def change(self, *args: Any) -> None:
        self.calls.append(("change", *args))

    def rewrite(self, txn: TxnInfo, rel: RelationVersion, change: Change, toast: Any,
                first: bool) -> None:
        self.calls.append(("rewrite", rel, change.lsn, first))


KEY = new_key()
TXN = TxnInfo(xid=900, first_lsn=0x200, final_lsn=0xA00, end_lsn=0xA40, commit_time=0)


def _replayer(d: Dictionary, plugin: Any, own: set[int]) -> Replayer:
    """A replayer committing TXN, which wrote a DDL message (describing the table as the
    dictionary has it there) at each LSN of ``own``."""
    r = Replayer(d, plugin, ddl_key=KEY)
    events: list[tuple[int, object]] = []
    for lsn in sorted(own):
        v = d.relation_for_oid(TABLE, lsn)
        assert v is not None
        events.append((lsn, sign(KEY, TXN.xid, json.dumps(
            {"kind": "relations", "db_oid": 5, "relations": [v.to_json()]}).encode())))
    r.apply_catalog(events, TXN)
    return r


def test_transient_heap_rows_go_to_rewrite_with_the_later_definition() -> None:
    d, _, after = _dictionary()
    rec = Recorder()
    _replayer(d, rec, {0x900}).replay(TXN, [_row(0x300, 1, 7), _row(0x340, 2, 7)])
    assert rec.calls == [("rewrite", after, 0x300, True), ("rewrite", after, 0x340, False)]


def test_without_a_later_definition_the_rows_have_the_current_one() -> None:
    d, before, _ = _dictionary()
    rec = Recorder()
    # no DDL message of its own: REFRESH, or a rewrite changing no column
    _replayer(d, rec, set()).replay(TXN, [_row(0x300, 1)])
    assert rec.calls == [("rewrite", before, 0x300, True)]


def test_test_decoding_prints_nothing_for_rewrite_rows() -> None:
    d, _, _ = _dictionary()
    lines: list[str] = []
    Replayer(d, TestDecoding(lines.append, d.types, version=15)).replay(
        TXN, [_row(0x300, 1, 7)])
    assert lines == []


def test_rewrite_layout_takes_the_rewriting_transactions_own_definition() -> None:
    d, before, after = _dictionary()
    assert d.rewrite_layout(TABLE, 0x300, {0x900}) is after
    assert d.rewrite_layout(TABLE, 0x300, ()) is before
    # another transaction's version in between (a type change it committed first) is skipped
    other = dataclasses.replace(before, valid_from=0x500)
    d.add_version(other)
    assert d.rewrite_layout(TABLE, 0x300, {0x900}) is after
    assert d.rewrite_layout(TABLE, 0x600, ()) is other


def test_rows_of_a_table_the_stream_does_not_publish_are_dropped() -> None:
    d, _, _ = _dictionary()
    rec = Recorder()
    Replayer(d, rec, filter=Filter(d, tables=frozenset({"public.other"}))).replay(
        TXN, [_row(0x300, 1, 7)])
    assert rec.calls == []
