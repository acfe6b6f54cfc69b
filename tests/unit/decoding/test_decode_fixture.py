"""Decoding real archived WAL without a server equals what a test_decoding slot printed on the
server that wrote it (committed fixtures: DML under every replica identity, subtransactions,
aborts, two-phase, ON CONFLICT, TRUNCATE, ALTER TABLE, VACUUM FULL/CLUSTER, unlogged and temp
tables, messages, interleaved sessions, an external TOAST value)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.carry import OpenTxn
from cdclake.decoding.context import DecodingContext, create_decoding_context
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.startup import Startup
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import XLogRecord
from cdclake.wal.source import DirectorySource
from tests.unit.decoding.fixture import DecodingFixture


def test_decode_equals_the_slot(decfix: DecodingFixture, tmp_path: Path) -> None:
    lines, result, _d = decfix.decode(tmp_path / "spill")
    assert lines == decfix.lines
    s = result.stats
    assert s.emitted >= sum(line.startswith("BEGIN") for line in lines) > 20
    assert s.aborted >= 3  # rolled back: a transaction, DDL, a prepared transaction
    assert s.skipped_before_start > 0  # the install's own transactions precede the slot


def test_decode_equals_the_slot_when_every_change_spills(decfix: DecodingFixture,
                                                         tmp_path: Path) -> None:
    lines, result, _d = decfix.decode(tmp_path / "spill", work_mem=1)
    assert lines == decfix.lines
    assert result.spilled_changes >= result.stats.changes // 2


def _records(fx: DecodingFixture) -> tuple[list[XLogRecord], int, int]:
    reader = XLogReader(DirectorySource([fx.dir]), start_lsn=fx.read_from)
    records = list(reader)
    return records, reader.version, reader.segment_size


@pytest.mark.parametrize("cuts", [1, 3])
def test_batches_cut_anywhere_decode_as_one_run(decfix: DecodingFixture, tmp_path: Path,
                                                cuts: int) -> None:
    """What the Spark job does between batches: each batch a new decoding context that
    continues the last one's start-up state and open transactions (their changes as stored
    bytes). The cuts fall inside open transactions."""
    records, version, segment_size = _records(decfix)
    # cut between two records of a transaction the slot printed
    printed = {int(line.split()[1]) for line in decfix.lines if line.startswith("BEGIN")}
    inside = [i for i in range(1, len(records))
              if records[i].xid in printed and records[i - 1].xid == records[i].xid]
    bounds = [inside[len(inside) * (i + 1) // (cuts + 1)] for i in range(cuts)]
    lines: list[str] = []
    store: dict[str, bytes] = {}
    dictionary = Dictionary()
    startup: Startup | None = None
    carried: list[OpenTxn] = []
    carried_any = False

    def put(xid: int, first_lsn: int, _part: int | None, path: Path) -> str:
        store[f"{xid}/{first_lsn}"] = path.read_bytes()
        return f"{xid}/{first_lsn}"

    def get(key: str, path: Path) -> None:
        path.write_bytes(store[key])

    for n, (lo, hi) in enumerate(zip([0, *bounds], [*bounds, len(records)], strict=True)):
        # each batch starts from the JSON the previous one left, as the Spark job does
        dictionary = Dictionary.from_json(dictionary.to_json())
        ctx: DecodingContext = create_decoding_context(
            decfix.options(tmp_path / f"spill{n}"), dictionary,
            TestDecoding(lines.append, dictionary.types, version=version),
            version=version, segment_size=segment_size, startup=startup, carried=carried,
            get=get)
        for rec in records[lo:hi]:
            ctx.process(rec)
        carried = [OpenTxn.from_json(t.to_json()) for t in ctx.save_open(put)]
        carried_any = carried_any or any(t.spill for t in carried)
        startup = Startup.from_json(ctx.startup.to_json())
        ctx.close()
    assert carried_any, "no cut fell inside a transaction with changes: the test proves nothing"
    assert lines == decfix.lines
