"""Which partition decodes what: owners, subtransactions, split transactions. Every
partition's decoder reads every record, as in the job."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cdclake.decoding import rmgrs
from cdclake.decoding.carry import OpenTxn, open_memberships
from cdclake.decoding.decode import Decoder
from cdclake.decoding.rmgrs import IGNORE, TXN
from cdclake.decoding.stripes import STRIPE_BITS
from cdclake.spark import routing
from cdclake.spark.facts import FactCollector
from cdclake.spark.routing import RouteMap, owner, resolve
from cdclake.spark.segments import SegmentFacts, facts_of
from cdclake.wal.record import XLogRecord
from cdclake.wal.rmgr import heap, xact
from tests.unit.decoding.records import (
    DB,
    commit_record,
    heap_record,
    message,
    recording_decoder,
)

N = 2
TOP, SUB, NESTED = 100, 101, 103  # a top-level xid and subxids its partition does not own


@dataclass
class Segment:
    """A segment's records, and the facts its scan collects."""

    records: list[XLogRecord]
    facts: SegmentFacts


def _segment(*recs: XLogRecord, version: int = 15) -> Segment:
    """These records, and their facts as the scan collects them."""
    facts = FactCollector()
    for rec in recs:
        kind = rmgrs.route_class(rec, DB)
        if kind != IGNORE or rec.toplevel_xid:
            facts.add(kind, rec, version)
    return Segment(list(recs), facts_of(facts))


def _decode(segs: list[Segment], rmap: RouteMap, tmp: Path) -> dict[int, Decoder]:
    """Every partition's decoder after every record of the batch, as the job feeds it (the
    commits it emits go into ``Recording``)."""
    out = {}
    for p in range(rmap.partitions):
        d, _seen = recording_decoder(tmp / f"p{p}")
        d.owns = routing.owns(p, rmap.partitions, rmap.split, rmap.top_of)
        d.share = routing.share(p, rmap.partitions, rmap.split, rmap.top_of)
        for seg in segs:
            for rec in seg.records:
                d.process(rec)
        out[p] = d
    return out


def _emitted(decoders: dict[int, Decoder]) -> dict[int, dict[int, list[int]]]:
    """partition -> {xid: LSNs of its changes} of the commits that partition owns."""
    return {p: {x: lsns for x, lsns in d.replay.emitted.items()  # type: ignore[attr-defined]
                if owner(x, N) == p} for p, d in decoders.items()}


def _buffered(d: Decoder) -> dict[int, tuple[int, list[int]]]:
    """xid -> (known top-level xid, LSNs of its buffered changes)."""
    return {x: (t.top, [c.lsn for c in t.changes]) for x, t in d.rb.by_txn.items()}


def test_changes_after_a_locking_savepoint_reach_the_owner(tmp_path: Path) -> None:
    """The reported loss: a subxact whose first record is a LOCK, its changes after it."""
    assert owner(TOP, N) != owner(SUB, N) and owner(TOP, N) != owner(NESTED, N)
    work = [
        heap_record(10, TOP),
        heap_record(20, SUB, heap.XLOG_HEAP_LOCK, toplevel=TOP),  # SELECT ... FOR UPDATE
        heap_record(30, SUB),  # names no top-level xid
        heap_record(40, NESTED, heap.XLOG_HEAP_LOCK, toplevel=TOP),
        heap_record(50, NESTED),
    ]
    # a batch that ends before the commit: the owner holds everything, knowing the subxacts
    seg = _segment(*work)
    rmap = RouteMap.merge(N, [seg.facts], {})
    assert rmap.top_of == {SUB: TOP, NESTED: TOP}
    decoders = _decode([seg], rmap, tmp_path / "open")
    assert _buffered(decoders[owner(TOP, N)]) == {TOP: (0, [10]), SUB: (TOP, [30]),
                                                  NESTED: (TOP, [50])}
    # the other partition learnt the memberships too, and holds no change
    assert _buffered(decoders[owner(SUB, N)]) == {TOP: (0, []), SUB: (TOP, []),
                                                  NESTED: (TOP, [])}
    # one batch up to the commit: the owner emits all of it
    seg = _segment(*work, commit_record(60, TOP, (SUB, NESTED)))
    rmap = RouteMap.merge(N, [seg.facts], {})
    emitted = _emitted(_decode([seg], rmap, tmp_path / "whole"))
    assert emitted[owner(TOP, N)] == {TOP: [10, 30, 50]}
    assert emitted[owner(SUB, N)] == {}


def test_memberships_known_only_from_the_commit_record(tmp_path: Path) -> None:
    """The subxact's first record was never read (before the stream's start): the commit's
    list, which the scan collects, still makes its change the top-level transaction's."""
    assert owner(TOP, N) != owner(SUB, N)
    seg = _segment(heap_record(10, TOP), heap_record(30, SUB), commit_record(60, TOP, (SUB,)))
    rmap = RouteMap.merge(N, [seg.facts], {})
    assert rmap.top_of == {SUB: TOP}
    assert _emitted(_decode([seg], rmap, tmp_path)) == {owner(TOP, N): {TOP: [10, 30]},
                                                        owner(SUB, N): {}}


def test_nested_parents_resolve_to_the_top_level_transaction() -> None:
    # a ROLLBACK TO SAVEPOINT of SUB lists its released child NESTED
    abort = commit_record(5, SUB, (NESTED,), op=xact.XLOG_XACT_ABORT)
    facts = _segment(abort).facts
    assert facts.parent_of == {NESTED: SUB}
    rmap = RouteMap.merge(N, [facts], {SUB: TOP})
    assert rmap.top_of == {NESTED: TOP, SUB: TOP}
    assert resolve({1: 2, 2: 3, 3: 4, 5: 3}) == {1: 4, 2: 4, 3: 4, 5: 4}
    assert resolve({1: 2, 2: 1}) in ({1: 1, 2: 1}, {1: 2, 2: 2})  # bad input: no endless loop


def test_carried_memberships_include_the_subxid_lists() -> None:
    def txn(xid: int, top: int = 0, subxids: tuple[int, ...] = ()) -> OpenTxn:
        return OpenTxn(xid, top, 1, subxids, False, "", (), (), 0)

    carried = open_memberships([txn(TOP, subxids=(SUB, NESTED)), txn(SUB, TOP), txn(7)])
    assert carried == {SUB: TOP, NESTED: TOP}
    later = _segment(heap_record(70, NESTED))
    rmap = RouteMap.merge(N, [later.facts], carried)
    assert [p for p in range(N) if routing.owns(p, N, rmap.split, rmap.top_of)(NESTED)] == [
        owner(TOP, N)]


def _large(xid: int, first_stripe: int, stripes: int) -> list[XLogRecord]:
    """Changes of ``xid``, 256 kB of them in each of ``stripes`` stripes of WAL."""
    out = []
    for s in range(first_stripe, first_stripe + stripes):
        rec = heap_record((s << STRIPE_BITS) + 100 + xid, xid)
        rec.tot_len = 1 << STRIPE_BITS
        out.append(rec)
    return out


def test_a_large_transaction_is_split_by_stripes(tmp_path: Path) -> None:
    split, new_table, open_at_end, carried, small = 200, 201, 202, 203, 204
    seg = _segment(
        *_large(split, 1, 4), *_large(new_table, 1, 4), *_large(open_at_end, 1, 4),
        *_large(carried, 1, 4), heap_record((3 << STRIPE_BITS) + 50, small),
        message((5 << STRIPE_BITS) + 1, split, "p", b"x"),  # every partition gets it
        heap_record((5 << STRIPE_BITS) + 2, new_table, rel=1259),  # a new pg_class row
        *(commit_record((6 << STRIPE_BITS) + x, x) for x in (split, new_table, carried, small)))
    rmap = RouteMap.merge(N, [seg.facts], {}, [_open(carried, unsplit=True)])
    # a new relation, carried whole from an earlier batch with TOAST chunks, too few changes:
    # not split; one that does not end in the batch is (its parts are carried)
    assert rmap.split == {split: 0, open_at_end: 0}
    assert rmap.unsplit == {new_table, carried}
    assert RouteMap.merge(1, [seg.facts], {}).split == {}  # nothing to share
    owns = [routing.owns(p, N, rmap.split) for p in range(N)]
    assert all(o(split) for o in owns) and [o(small) for o in owns].count(True) == 1

    emitted = _emitted_all(_decode([seg], rmap, tmp_path))
    lsns = [r.lsn for r in _large(split, 1, 4)]
    # every partition has the changes of its stripes, and they are all of them; and the
    # message, which a decoder with a share emits from one (Decoder.share)
    mine = {p: [x for x in emitted[p][split] if x in lsns] for p in range(N)}
    for p in range(N):
        assert mine[p] == [x for x in lsns if (split + (x >> STRIPE_BITS)) % N == p]
        assert len(emitted[p][split]) == len(mine[p]) + 1
    assert sorted(x for p in range(N) for x in mine[p]) == lsns
    # a transaction not split is one partition's
    assert [small in emitted[p] for p in range(N)].count(True) == 1


def _open(xid: int, part: int | None = None, parts: int = 0, since: int = 0,
          unsplit: bool = False) -> OpenTxn:
    return OpenTxn(xid, 0, 100, (), False, "", (), (), 0, part, parts, since, unsplit)


def test_a_split_transaction_carried_in_parts_stays_split_while_it_can() -> None:
    parted, toasted, resized, whole, sticky, small = 300, 301, 302, 303, 304, 305
    carried = [_open(x, p, parts, since=77) for x, parts in
               ((parted, N), (toasted, N), (resized, 3)) for p in range(parts)]
    carried += [_open(whole), _open(sticky, unsplit=True), _open(small)]
    facts = FactCollector()
    for x in (resized, whole, sticky):  # large in this batch too
        for rec in _large(x, 1, 4):
            facts.add(TXN, rec, 15)
    facts.unsplit.add(toasted)  # as a TOAST chunk or a new catalog row makes it
    start = 5 << STRIPE_BITS
    rmap = RouteMap.merge(N, [facts_of(facts)], {}, carried, start_lsn=start)
    # split as before; TOAST now: whole to the owner. Another number of partitions or carried
    # whole: split from this batch on, the earlier changes the owner's; TOAST before: never
    assert rmap.split == {parted: 77, resized: start, whole: start}
    keeps = [routing.keeps(p, N, rmap.split) for p in range(N)]
    for o in carried:
        takers = [p for p in range(N) if keeps[p](o)]
        if o.xid == parted:
            assert takers == [o.part]  # each its own part back
        else:
            assert takers == [owner(o.xid, N)]  # every part to the owner, who reunites them
    shares = [routing.share(p, N, rmap.split) for p in range(N)]
    for lsn in (start - 1, start, start + (1 << STRIPE_BITS)):  # before the split: the owner's
        emitting = [p for p in range(N) if shares[p](whole, lsn)]  # type: ignore[misc]
        assert emitting == [owner(whole, N) if lsn < start else
                            (whole + (lsn >> STRIPE_BITS)) % N]
    marked = {o.xid: o.unsplit for o in rmap.carried(carried)}
    assert marked[toasted] and marked[sticky] and not marked[whole] and not marked[parted]
    assert RouteMap.merge(1, [], {}, carried).split == {}
    # carried by a version that did not mark them: never split
    legacy = {k: v for k, v in _open(whole).to_json().items() if k != "unsplit"}
    assert OpenTxn.from_json(legacy).unsplit


def _emitted_all(decoders: dict[int, Decoder]) -> dict[int, dict[int, list[int]]]:
    """partition -> {xid: LSNs of its changes} of every commit the partition replayed."""
    return {p: dict(d.replay.emitted) for p, d in decoders.items()}  # type: ignore[attr-defined]
