"""Commit conflicts and unknown commit outcomes: retry only what is safe, decide from the LSN."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import Transaction

from cdclake.config import Config
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.batch import read_batch
from cdclake.lake.merge import merge_batch
from tests.support.streamgen import Stream
from tests.unit.lake.test_lake_merge import data, failure, items, mirror, run


def _two_batches(catalog: Catalog, config: Config, stream: Stream) -> None:
    rel = items()
    b1 = stream.batch("b1")
    with b1.txn() as t:
        t.insert(rel, {"id": 1, "name": "a", "qty": 1})
    run(catalog, config, b1)
    b2 = stream.batch("b2")
    with b2.txn() as t:
        t.update(rel, {"id": 1, "name": "b", "qty": 2})
        t.insert(rel, {"id": 2, "name": "c", "qty": 3})
    b2.write()


def test_conflict_with_a_concurrent_merge_is_retried_from_fresh_state(
        catalog: Catalog, config: Config, stream: Stream, duck: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _two_batches(catalog, config, stream)
    real = Transaction.commit_transaction
    raced = []

    def racing_commit(self: Transaction) -> Any:
        if not raced:
            raced.append(True)
            monkeypatch.setattr(Transaction, "commit_transaction", real)
            # another run of the same batch lands first
            merge_batch(catalog, config, read_batch(stream.root, "b2"))
            monkeypatch.setattr(Transaction, "commit_transaction", racing_commit)
        return real(self)

    monkeypatch.setattr(Transaction, "commit_transaction", racing_commit)
    report = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    (r,) = report.tables
    assert raced and r.attempts == 2
    assert r.skipped_applied == 2 and r.inserted == 0  # the retry saw the other run's LSN
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "b", "qty": 2},
                                                   {"id": 2, "name": "c", "qty": 3}]


def test_unknown_commit_state_is_decided_from_the_summary(
        catalog: Catalog, config: Config, stream: Stream, duck: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _two_batches(catalog, config, stream)
    real = Transaction.commit_transaction

    def landed_but_unknown(self: Transaction) -> Any:
        real(self)
        raise CommitStateUnknownException("connection reset after the commit was sent")

    monkeypatch.setattr(Transaction, "commit_transaction", landed_but_unknown)
    snapshots = len(mirror(catalog, config).snapshots())
    report = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    (r,) = report.tables
    assert r.attempts == 1 and r.commit_lsn is not None
    assert r.snapshot_id == mirror(catalog, config).current_snapshot().snapshot_id
    assert len(mirror(catalog, config).snapshots()) > snapshots
    monkeypatch.setattr(Transaction, "commit_transaction", real)
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "b", "qty": 2},
                                                   {"id": 2, "name": "c", "qty": 3}]


def test_unknown_commit_state_that_did_not_land_is_recomputed(
        catalog: Catalog, config: Config, stream: Stream, duck: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _two_batches(catalog, config, stream)
    real = Transaction.commit_transaction
    calls = []

    def lost_once(self: Transaction) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise CommitStateUnknownException("timeout before the catalog answered")
        return real(self)

    monkeypatch.setattr(Transaction, "commit_transaction", lost_once)
    report = merge_batch(catalog, config, read_batch(stream.root, "b2"))
    assert report.tables[0].attempts == 2 and report.tables[0].updated == 1
    monkeypatch.setattr(Transaction, "commit_transaction", real)
    assert data(mirror(catalog, config), duck) == [{"id": 1, "name": "b", "qty": 2},
                                                   {"id": 2, "name": "c", "qty": 3}]


def test_endless_conflicts_stop_with_a_clear_error(catalog: Catalog, config: Config,
                                                   stream: Stream,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _two_batches(catalog, config, stream)

    def always_conflicts(self: Transaction) -> Any:
        raise CommitFailedException("metadata location changed")

    monkeypatch.setattr(Transaction, "commit_transaction", always_conflicts)
    report = merge_batch(catalog, config, read_batch(stream.root, "b2"),
                         engine=ArrowMerge(catalog, config, max_attempts=3))
    assert re.search(r"public\.items.*conflicted with concurrent writers 3",
                     failure(report, "public.items"))


def test_other_stream_owning_the_table_is_refused(catalog: Catalog, config: Config,
                                                  stream: Stream) -> None:
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(items(), {"id": 1, "name": "a", "qty": 1})
    run(catalog, config, b)
    report = merge_batch(catalog, config.replace(stream="other"), read_batch(stream.root, "b1"))
    assert re.search(r"cdc\.public__items is the mirror of stream 'test', not the mirror of "
                     r"stream 'other'", failure(report, "public.items"))


def test_table_not_created_by_cdclake_is_refused(catalog: Catalog, config: Config,
                                                 stream: Stream) -> None:
    catalog.create_namespace("cdc")
    catalog.create_table(("cdc", "public__items"), pa.schema([pa.field("id", pa.int32())]))
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(items(), {"id": 1, "name": "a", "qty": 1})
    assert "exists but was not created by cdclake" in failure(run(catalog, config, b),
                                                               "public.items")
