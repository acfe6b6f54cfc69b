"""A new stream without a start LSN starts at the first full dictionary of its first batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.signing import new_key, sign
from cdclake.config import Config
from cdclake.errors import DecodingError
from cdclake.lsn import segment_name
from cdclake.spark.job import _dictionary_start, _Inherited
from cdclake.spark.plan import plan_batch
from cdclake.spark.segments import ParsedSegment, is_dictionary_message
from cdclake.wal.record import XLogRecord
from tests.support.walfiles import SEGSIZE
from tests.unit.decoding.records import DB, heap_record, message
from tests.unit.spark.test_plan import _store

KEY = new_key()
DICTIONARY = json.dumps({"kind": "dictionary", "db_oid": DB, "relations": []}).encode()


def test_only_a_signed_full_dictionary_of_the_database_counts() -> None:
    def msg(content: bytes, *, xid: int = 7, prefix: str = "cdclake.ddl",
            transactional: bool = True) -> XLogRecord:
        return message(100, xid, prefix, content, transactional=transactional)

    def signed(body: bytes, xid8: int = 7) -> bytes:
        return sign(KEY, xid8, body)

    assert is_dictionary_message(msg(signed(DICTIONARY)), DB, KEY)
    assert is_dictionary_message(msg(signed(DICTIONARY, 7 + (3 << 32))), DB, KEY)  # epoch 3
    assert not is_dictionary_message(msg(signed(DICTIONARY)), DB + 1, KEY)
    assert not is_dictionary_message(msg(signed(DICTIONARY), transactional=False), DB, KEY)
    assert not is_dictionary_message(msg(signed(DICTIONARY), prefix="cdclake.other"), DB, KEY)
    assert not is_dictionary_message(
        msg(signed(b'{"kind": "relations", "relations": []}')), DB, KEY)
    assert not is_dictionary_message(msg(signed(b"not json")), DB, KEY)
    assert not is_dictionary_message(msg(signed(b'["dictionary"]')), DB, KEY)
    # forged: unsigned, signed with another key, signed for another transaction
    assert not is_dictionary_message(msg(DICTIONARY), DB, KEY)
    assert not is_dictionary_message(msg(sign(new_key(), 7, DICTIONARY)), DB, KEY)
    assert not is_dictionary_message(msg(signed(DICTIONARY), xid=8), DB, KEY)
    assert not is_dictionary_message(heap_record(100, 7), DB, KEY)


def _summary(segno: int, dictionary_lsn: int | None) -> ParsedSegment:
    start = segno * SEGSIZE
    return ParsedSegment(segno, 15, start + 40, start - 8, start + SEGSIZE - 80, start + SEGSIZE,
                    "", dictionary_lsn)


def _first(config: Config, **kw: object) -> _Inherited:
    return _Inherited.first(config, kw.get("start_lsn"), DB,  # type: ignore[arg-type]
                            kw.get("dictionary"))  # type: ignore[arg-type]


def test_the_first_batch_starts_at_the_earliest_dictionary(tmp_path: Path) -> None:
    plan = plan_batch(_store(tmp_path, [3, 4, 5]), Layout(), None, None)
    assert plan is not None
    state = _first(Config())
    assert state.from_dictionary and state.start_lsn == 0
    lsn4, lsn5 = 4 * SEGSIZE + 1000, 5 * SEGSIZE + 200
    resolved = _dictionary_start(plan, [_summary(3, None), _summary(4, lsn4),
                                        _summary(5, lsn5)], state)
    assert resolved.start_lsn == lsn4 and resolved.from_dictionary
    assert state.start_lsn == 0  # a new state; the inputs are left alone


def test_a_first_batch_without_a_dictionary_is_refused_naming_its_segments(
        tmp_path: Path) -> None:
    plan = plan_batch(_store(tmp_path, [3, 4]), Layout(), None, None)
    assert plan is not None
    first, last = segment_name(1, 3, SEGSIZE), segment_name(1, 4, SEGSIZE)
    with pytest.raises(DecodingError) as err:
        _dictionary_start(plan, [_summary(3, None), _summary(4, None)], _first(Config()))
    text = str(err.value)
    assert f"segments {first}..{last}" in text and "\n" not in text
    assert "cdclake source install" in text and "--start-lsn" in text


def test_an_explicit_start_or_dictionary_keeps_the_old_start() -> None:
    assert not _first(Config(), start_lsn=0).from_dictionary
    state = _first(Config(), start_lsn=1234)
    assert not state.from_dictionary and state.start_lsn == 1234
    assert not _first(Config(), dictionary=Dictionary()).from_dictionary
