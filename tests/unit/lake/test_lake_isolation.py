"""One table never stops the others: a table whose merge fails is reported and retried while
the others commit; a value cdclake could not print quarantines its table alone; excluded
tables are not merged. Mirrors read back through DuckDB; the failures are real ones (a mirror
made incompatible through pyiceberg), not simulated."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.types import StringType

from cdclake.config import Config
from cdclake.decoding import stream as contract
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from cdclake.lake.quarantine import PROPERTY
from cdclake.lake.tables import mirror_status
from cdclake.lake.visibility import PROPERTY as FACTS
from cdclake.lake.visibility import SnapshotFacts, property_value
from cdclake.lake.watermark import merged_end_lsn
from tests.support.streamgen import BatchBuilder, Rel, Stream, Txn, relation
from tests.unit.lake.test_lake_merge import data, failure, items, mirror, run


def odd() -> Rel:
    """A table whose column ``x`` is of a type cdclake cannot print (a cube, say)."""
    return relation("odd", [("id", pa.int32()), ("x", pa.string())], key=["id"], oid=16600)


def unprinted(t: Txn, attnum: int) -> None:
    """The change just added holds a value the decoder could not print: an entry without
    text (what the Arrow plugin writes for NoTextOutput)."""
    t.pending[-1][1][contract.PG_TEXT] = {str(attnum): None}


def merged_end(catalog: Catalog, config: Config) -> int | None:
    return merged_end_lsn(catalog, config.namespace, config.stream)


def test_a_value_cdclake_cannot_print_quarantines_its_table_alone(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    a, o = items(), odd()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(o, {"id": 1, "x": "(1, 2)"})  # printed: a text like any string
    with b1.txn() as t:
        t.insert(a, {"id": 1, "name": "a", "qty": 1})
        t.insert(o, {"id": 2})
        unprinted(t, 2)
        t.insert(o, {"id": 3, "x": "(3)"})
    report = run(catalog, config, b1)
    assert [q["table"] for q in report.quarantined] == ["public.odd"]
    reason = report.quarantined[0]["reason"]
    assert reason.startswith("column x (attnum 2) has a value at LSN ") and \
        "cdclake snapshot --tables public.odd" in reason and "CDCLAKE_EXCLUDE_TABLES" in reason
    assert [t.table for t in report.tables] == ["public.items"]
    assert report.end_lsn == merged_end(catalog, config) == b1.stream.lsn  # not held back
    held = mirror(catalog, config, "odd")
    assert held.current_snapshot() is None  # nothing of the batch applied, not even row 1
    assert json.loads(held.properties[PROPERTY])["batch"] == "b1"
    assert mirror_status(config, catalog)["public.odd"]["quarantined"] == reason
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "a", "qty": 1}]

    b2 = stream.batch("b2")  # printable values only: the table stays quarantined
    with b2.txn() as t:
        t.insert(o, {"id": 4, "x": "(4)"})
        t.insert(a, {"id": 2, "name": "b", "qty": 2})
    again = run(catalog, config, b2)
    assert again.quarantined == [{"table": "public.odd", "reason": reason, "since_batch": "b1"}]
    assert mirror(catalog, config, "odd").current_snapshot() is None
    assert len(data(mirror(catalog, config), duck)) == 2
    assert again.end_lsn == b2.stream.lsn


def test_a_value_the_initial_snapshot_holds_is_no_reason(catalog: Catalog, config: Config,
                                                        stream: Stream, duck: Any) -> None:
    """The mirror's initial snapshot saw the transaction of the value cdclake cannot print:
    the merge skips that change anyway, and applies the rest."""
    o = odd()
    b0 = stream.batch("b0")
    with b0.txn() as t:
        t.insert(o, {"id": 9, "x": "(9)"})
    run(catalog, config, b0)
    b1 = stream.batch("b1")
    with b1.txn() as t:  # xid 702, in the snapshot (below its xmin)
        t.insert(o, {"id": 1})
        unprinted(t, 2)
    with b1.txn() as t:  # xid 703, not yet when it was taken (its xmax)
        t.insert(o, {"id": 2, "x": "(2)"})
    facts = SnapshotFacts("00000003-1", stream.lsn, stream.lsn + 1, 703, 703, (), 0)
    table = mirror(catalog, config, "odd")
    with table.transaction() as tx:
        tx.set_properties({FACTS: property_value(facts)})
    report = run(catalog, config, b1)
    assert report.quarantined == []
    assert report.tables[0].skipped_snapshot == 1 and report.tables[0].inserted == 1
    assert data(mirror(catalog, config, "odd"), duck) == [{"id": 2, "x": "(2)"},
                                                         {"id": 9, "x": "(9)"}]


def _changes(b: BatchBuilder, a: Rel, d: Rel, n: int) -> None:
    with b.txn() as t:
        t.insert(a, {"id": n, "name": f"a{n}", "qty": n})
        t.insert(d, {"id": n, "body": f"d{n}", "v": n})
    if n > 1:
        with b.txn() as t:
            t.update(a, {"id": n - 1, "name": "changed", "qty": 0})
            t.delete(d, {"id": n - 1})


def test_a_table_whose_merge_fails_is_retried_while_the_others_commit(
        catalog: Catalog, config: Config, stream: Stream, duck: Any) -> None:
    """``items``' mirror gets a column by hand (no attnum: the merge cannot tie it to the
    source) after the first batch: its merge fails on the second; ``docs`` commits it and the
    third, during which ``items`` is held back (its changes go in order), and the stream's
    merged end LSN stays before the second. The column dropped again, the next run merges
    the second and third batches again: ``items`` catches up, ``docs`` skips what it has."""
    a = items()
    d = relation("docs", [("id", pa.int64()), ("body", pa.string()), ("v", pa.int32())],
                 key=["id"], oid=16500)
    batches = []
    for n in (1, 2, 3):
        b = stream.batch(f"b{n}")
        _changes(b, a, d, n)
        b.write()
        batches.append(b)
    first = merge_batch(catalog, config, read_batch(stream.root, "b1"))
    with mirror(catalog, config).update_schema() as update:
        update.add_column("by_hand", StringType())

    second = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    assert "by_hand" in failure(second, "public.items")
    assert [t.table for t in second.tables] == ["public.docs"]
    third = merge_batch(catalog, config, read_batch(stream.root, "b3"),
                        held_back={a.version.oid: "public.items"},
                        follows=batches[2].start_lsn)  # b2's end
    assert third.held_back == ["public.items"] and third.failed == []
    assert [t.table for t in third.tables] == ["public.docs"]
    assert merged_end(catalog, config) == first.end_lsn  # b2 and b3 stay pending
    assert data(mirror(catalog, config, "docs"), duck) == [{"id": 3, "body": "d3", "v": 3}]
    assert [r["id"] for r in data(mirror(catalog, config), duck)] == [1]

    with mirror(catalog, config).update_schema() as update:
        update.delete_column("by_hand")
    retried = [merge_batch(catalog, config, read_batch(stream.root, b.name))
               for b in batches[1:]]
    assert [r.failed for r in retried] == [[], []]
    by_table = {t.table: t for t in retried[0].tables}
    assert by_table["public.items"].inserted == 1 and by_table["public.docs"].inserted == 0
    assert by_table["public.docs"].skipped_applied == 2
    assert merged_end(catalog, config) == retried[1].end_lsn == stream.lsn
    assert data(mirror(catalog, config), duck) == [
        {"id": 1, "name": "changed", "qty": 0}, {"id": 2, "name": "changed", "qty": 0},
        {"id": 3, "name": "a3", "qty": 3}]


def test_excluded_tables_are_not_merged(catalog: Catalog, config: Config, stream: Stream,
                                        duck: Any) -> None:
    a, o = items(), odd()
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(a, {"id": 1, "name": "a", "qty": 1})
        t.insert(o, {"id": 1, "x": "(1)"})
    report = run(catalog, config.replace(exclude_tables=["public.odd"]), b)
    assert report.excluded == ["public.odd"] and [t.table for t in report.tables] == \
        ["public.items"]
    assert not catalog.table_exists((config.namespace, "public__odd"))
    assert report.end_lsn == b.stream.lsn
