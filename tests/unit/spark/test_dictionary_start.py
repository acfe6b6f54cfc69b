"""A new stream without a start LSN starts at the first full dictionary of its first batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.catalog.dictionary import Dictionary
from cdclake.config import Config
from cdclake.errors import DecodingError
from cdclake.spark.job import _dictionary_start, _Inherited, _Summary
from cdclake.spark.plan import plan_batch
from cdclake.spark.segments import is_dictionary_message
from cdclake.wal.lsn import segment_name
from tests.unit.archive.walfiles import SEGSIZE
from tests.unit.decoding.records import DB, heap_record, message
from tests.unit.spark.test_plan import _store

DICTIONARY = json.dumps({"kind": "dictionary", "db_oid": DB, "relations": []}).encode()


def test_only_a_full_dictionary_of_the_database_counts() -> None:
    assert is_dictionary_message(message(100, 7, "cdclake.ddl", DICTIONARY), DB)
    assert not is_dictionary_message(message(100, 7, "cdclake.ddl", DICTIONARY), DB + 1)
    assert not is_dictionary_message(
        message(100, 7, "cdclake.ddl", DICTIONARY, transactional=False), DB)
    assert not is_dictionary_message(message(100, 7, "cdclake.other", DICTIONARY), DB)
    assert not is_dictionary_message(
        message(100, 7, "cdclake.ddl", b'{"kind": "relations", "relations": []}'), DB)
    assert not is_dictionary_message(message(100, 7, "cdclake.ddl", b"not json"), DB)
    assert not is_dictionary_message(message(100, 7, "cdclake.ddl", b'["dictionary"]'), DB)
    assert not is_dictionary_message(heap_record(100, 7), DB)


def _summary(segno: int, dictionary_lsn: int | None) -> _Summary:
    start = segno * SEGSIZE
    return _Summary(segno, 15, start + 40, start - 8, start + SEGSIZE - 80, start + SEGSIZE,
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
