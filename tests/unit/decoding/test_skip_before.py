"""The dictionary-start mode of the decoder (``skip_before``): a new stream starting at
``cdclake source install``'s full dictionary queues no change recorded before it, keeps the
catalog bookkeeping, and does not refuse transactions whose earlier changes it cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.decode import DDL_PREFIX, Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup
from cdclake.errors import DecodingError
from cdclake.wal.record import XLogRecord
from tests.unit.decoding.records import (
    DB,
    Recording,
    commit_record,
    heap_record,
    message,
    multi_insert,
    running_xacts,
    truncate,
)

START = 1000  #: the full dictionary's record LSN
OPEN, BEFORE, AFTER = 10, 11, 12  #: open across the start; committed before; begun after


def workload() -> list[XLogRecord]:
    """Changes of every kind on both sides of START; OPEN is running at the first
    running-xacts record and writes on both sides."""
    return [
        running_xacts(50, (OPEN,)),
        heap_record(100, OPEN),
        message(110, OPEN, "app", b"before"),
        message(120, OPEN, DDL_PREFIX, b'{"kind": "relations", "relations": []}'),
        multi_insert(130, OPEN, 3),
        truncate(140, OPEN),
        heap_record(200, BEFORE),
        commit_record(300, BEFORE),
        heap_record(400, BEFORE + 100),  # begun before, its commit is after START
        message(START, 99, DDL_PREFIX, b'{"kind": "dictionary"}'),
        commit_record(START + 8, 99),
        heap_record(1100, OPEN),
        multi_insert(1110, OPEN, 2),
        message(1120, OPEN, "app", b"after"),
        heap_record(1200, AFTER),
        truncate(1210, AFTER),
        commit_record(1300, OPEN),
        commit_record(1400, AFTER),
        commit_record(1500, BEFORE + 100),
    ]


def decoder(spill: Path, skip_before: int) -> tuple[Decoder, Recording]:
    """A fresh decoder (its first record decides how decoding starts), as a batch builds it."""
    rec = Recording()
    d = Decoder(db_oid=DB, buffer=ReorderBuffer(1 << 20, spill, 1 << 20), replay=rec,
                filter=Filter(Dictionary()), start_lsn=START, version=15, tracker=rec,
                skip_before=skip_before)
    return d, rec


def test_changes_before_the_dictionary_are_not_queued(tmp_path: Path) -> None:
    d, seen = decoder(tmp_path, START)
    for r in workload():
        d.process(r)
    # the transaction open across the start keeps only what it wrote after it (the message
    # is queued at its record's end LSN); the one committed before is not emitted at all
    assert seen.emitted == {99: [START + 8], OPEN: [1100, 1110, 1110, 1128],
                            AFTER: [1200, 1210]}
    assert BEFORE + 100 not in seen.emitted  # its only change preceded the start
    # OPEN's heap insert, 2 messages, 3 multi-insert tuples and TRUNCATE; BEFORE's and 111's
    assert d.stats.cut_before_start == 9
    # the catalog bookkeeping is kept: OPEN's DDL message before the start still applies
    catalog = [e for what, events in seen.calls if what == "apply_catalog"
               for e in events]  # type: ignore[attr-defined]
    assert [lsn for lsn, _event in catalog] == [START, 120]


def test_an_explicit_start_lsn_decodes_as_before(tmp_path: Path) -> None:
    """skip_before 0: every change is queued, and the incomplete-transaction check holds."""
    d, seen = decoder(tmp_path, 0)
    with pytest.raises(DecodingError, match=f"transaction {OPEN} commits at"):
        for r in workload():
            d.process(r)
    d, seen = decoder(tmp_path / "again", 0)
    d.startup = Startup(set(), continued=True)  # past the first record: no clean-start test
    for r in workload()[1:]:
        d.process(r)
    assert seen.emitted[OPEN] == [100, 118, 128, 130, 130, 130, 140, 1100, 1110, 1110, 1128]
    assert seen.emitted[BEFORE + 100] == [400]
    assert d.stats.cut_before_start == 0


def test_nothing_is_suspect_in_the_dictionary_start_mode(tmp_path: Path) -> None:
    """The empty suspect set is what the next batch inherits (decoding.startup.Startup)."""
    d, _seen = decoder(tmp_path, START)
    assert d.startup.suspects == set()
    d.process(running_xacts(50, (OPEN, AFTER)))
    assert d.startup.suspects == set()
    assert Startup.from_json(d.startup.to_json()).suspects == set()
    d, _seen = decoder(tmp_path / "explicit", 0)
    assert d.startup.suspects is None
    d.process(running_xacts(50, (OPEN, AFTER)))
    assert d.startup.suspects == {OPEN, AFTER}
