"""The decoding context every caller builds the same way: a batch cut carried through its
start-up state and open transactions decodes exactly as one run, and decoders that share a WAL
by ownership emit each transaction exactly once. No server: synthetic records over a one-column
table."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import Column, RelationVersion
from cdclake.decoding.carry import OpenTxn
from cdclake.decoding.context import DecodeOptions, DecodingContext, create_decoding_context
from cdclake.decoding.plugins.arrow import ArrowRows
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.startup import CONSISTENT, START, Startup
from cdclake.errors import DecodingError
from cdclake.wal.record import XLogRecord
from tests.unit.decoding.records import (
    DB,
    USER_REL,
    commit_record,
    heap_record,
    message,
    running_xacts,
)
from tests.unit.tuples.builtin_types import BUILTIN


def dictionary() -> Dictionary:
    d = Dictionary()
    d.types.put(BUILTIN[23], 0)
    d.add_version(RelationVersion(
        oid=USER_REL, db_oid=DB, tablespace=1663, relfilenode=USER_REL, schema="public",
        name="t", qualified="public.t", relkind="r", persistence="p", replident="d",
        columns=(Column(1, "v", "v", 23, -1, 4, "i", True),), key_attnums=(1,)))
    return d


def workload() -> list[XLogRecord]:
    """Transaction 10 spans the cut (with subtransaction 11, first named on its record), 12
    commits before it, 13 after; 9 was running at the first running-xacts and never ends."""
    return [
        running_xacts(50, (9,)),
        heap_record(100, 10),
        heap_record(110, 11, toplevel=10),
        heap_record(120, 12),
        commit_record(200, 12),
        message(210, 0, "app", b"hello", transactional=False),
        # -- the batch cut --
        heap_record(300, 10),
        heap_record(310, 13),
        heap_record(320, 11),
        commit_record(400, 10, (11,)),
        commit_record(410, 13),
    ]


CUT = 6


def context(tmp: Path, lines: list[str], **kw: object) -> DecodingContext:
    d = dictionary()
    # work_mem 1 byte: every queued change spills, so the carry moves spill-file bytes
    options = DecodeOptions(db_oid=DB, start_lsn=0, work_mem=1, spill_dir=tmp)
    return create_decoding_context(options, d, TestDecoding(lines.append, d.types, version=15),
                                   version=15, segment_size=1 << 20, **kw)  # type: ignore[arg-type]


def test_a_cut_batch_decodes_as_one_run(tmp_path: Path) -> None:
    whole: list[str] = []
    one = context(tmp_path / "one", whole)
    for r in workload():
        one.process(r)
    assert whole[0] == "BEGIN 12" and whole.count("COMMIT 10") == 1
    assert any(line.startswith("message: transactional: 0 prefix: app") for line in whole)

    store: dict[str, bytes] = {}

    def put(xid: int, first_lsn: int, _part: int | None, path: Path) -> str:
        store[f"{xid}-{first_lsn}"] = path.read_bytes()
        return f"{xid}-{first_lsn}"

    def get(key: str, path: Path) -> None:
        path.write_bytes(store[key])

    cut: list[str] = []
    first = context(tmp_path / "a", cut)
    for r in workload()[:CUT]:
        first.process(r)
    carried = [OpenTxn.from_json(t.to_json()) for t in first.save_open(put)]
    first.close()
    assert {t.xid for t in carried} == {10, 11}
    assert all(len(t.spill) == 1 and t.spill[0] in store for t in carried)
    state = Startup.from_json(first.startup.to_json())
    second = context(tmp_path / "b", cut, startup=state, carried=carried, get=get)
    for r in workload()[CUT:]:
        second.process(r)
    assert cut == whole


def test_a_continued_decoder_does_not_forget_its_suspects(tmp_path: Path) -> None:
    """9 was running at the first running-xacts record: its commit in a later batch is refused
    there too, which a fresh decoder (START, then new suspects) would not know."""
    first = context(tmp_path / "a", [])
    for r in workload()[:CUT]:
        first.process(r)
    assert first.startup.state == CONSISTENT and first.startup.suspects == {9}
    second = context(tmp_path / "b", [], startup=Startup.from_json(first.startup.to_json()))
    second.process(heap_record(490, 9))
    with pytest.raises(DecodingError, match="transaction 9 commits at"):
        second.process(commit_record(500, 9))


def test_the_carried_state_is_copied_not_shared(tmp_path: Path) -> None:
    state = Startup.from_json({"state": START, "suspects": None})
    ctx = context(tmp_path, [], startup=state)
    ctx.process(running_xacts(50, (9,)))
    assert ctx.startup.suspects == {9} and state.suspects is None


def test_owners_emit_each_transaction_once(tmp_path: Path) -> None:
    whole: list[str] = []
    one = context(tmp_path / "one", whole)
    for r in workload():
        one.process(r)
    outputs = []
    for index in (0, 1):
        lines: list[str] = []
        ctx = context(tmp_path / f"p{index}", lines, owns=lambda x, i=index: x % 2 == i,
                      messages=index == 0)
        for r in workload():
            ctx.process(r)
        outputs.append(lines)
    # 10 and 12 are owned by 0 (with the message), 13 by 1; together the whole run
    assert {line for line in outputs[1] if line.startswith("BEGIN")} == {"BEGIN 13"}
    assert not any("message" in line for line in outputs[1])
    assert sorted(outputs[0] + outputs[1]) == sorted(whole)
    # every owner applies every transaction's catalog events: nothing here differs
    assert one.dictionary.to_json() == ctx.dictionary.to_json()


class ListSink:
    """A row sink remembering every part it is handed."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, int, pa.Table]] = []

    def part(self, rel: RelationVersion, index: int, table: pa.Table) -> str:
        self.parts.append((rel.name, index, table))
        return f"{rel.name}-{index}"


def test_the_arrow_row_builder_hands_full_parts_to_its_sink(tmp_path: Path) -> None:
    d = dictionary()
    sink = ListSink()
    rows = ArrowRows(d.types, sink, rows_per_part=2)
    options = DecodeOptions(db_oid=DB, start_lsn=0, spill_dir=tmp_path)
    ctx = create_decoding_context(options, d, rows, version=15, segment_size=1 << 20)
    for r in workload():
        ctx.process(r)
    # commit order: 12's row, 10's four (with subtransaction 11's, in LSN order), 13's
    assert [i for _name, i, _t in sink.parts] == [0, 1, 2]
    entries = rows.finish()
    assert [(rel.name, paths, n) for rel, paths, n in entries] == [
        ("t", ["t-0", "t-1", "t-2"], 6)]
    values = pa.concat_tables(t for _n, _i, t in sink.parts).column("v").to_pylist()
    assert values == [120, 100, 110, 300, 320, 310]


def test_the_arrow_row_builder_cuts_parts_by_bytes_too(tmp_path: Path) -> None:
    """A part is handed over when its row data reaches ``bytes_per_part``, however few rows it
    has: wide rows cannot make a buffer grow past its byte budget."""
    d = dictionary()
    sink = ListSink()
    rows = ArrowRows(d.types, sink, rows_per_part=1000, bytes_per_part=1)
    options = DecodeOptions(db_oid=DB, start_lsn=0, spill_dir=tmp_path)
    ctx = create_decoding_context(options, d, rows, version=15, segment_size=1 << 20)
    for r in workload():
        ctx.process(r)
    rows.finish()
    assert [t.num_rows for _n, _i, t in sink.parts] == [1] * 6
