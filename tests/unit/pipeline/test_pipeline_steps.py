"""The pipeline's steps over a local store and a SQLite catalog, with batches written in the
decoder's layout (no Spark, no PostgreSQL): what is pending, partial and dry-run merges,
reports, and the CLI wiring of ``cdclake run`` / ``cdclake status`` (with synthetic segments:
what the next decode takes)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from cdclake.archive import Layout, open_store
from cdclake.archive.lease import LAKE, Lease
from cdclake.cli import main
from cdclake.config import Config
from cdclake.errors import ConfigError, LakeError, QualityError
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.catalog import open_catalog
from cdclake.lake.pending import list_batches
from cdclake.lake.watermark import merged_end_lsn
from cdclake.lsn import format_lsn, segment_name
from cdclake.pipeline import (
    RunParams,
    merge,
    raise_for_failed_tables,
    report,
    steps,
    validate_stream,
    validate_tables,
)
from cdclake.pipeline.commands import describe
from cdclake.pipeline.steps import safe_run_id
from cdclake.stream.progress import save_progress
from tests.support.streamgen import Stream
from tests.support.walfiles import SEGSIZE
from tests.unit.lake.test_pending import items, owners, two_batches
from tests.unit.spark.test_plan import _progress, _push


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Each batch merged alone (``merge_max_rows`` 1): these tests follow a batch at a time;
    :func:`test_a_backlog_is_merged_at_once_up_to_merge_max_rows` merges them together."""
    return Config(home=tmp_path / "home", store_url=(tmp_path / "store").as_uri(),
                  merge_max_rows=1)


@pytest.fixture
def stream(tmp_path: Path) -> Stream:
    """Batches land where the store's ``changes/`` prefix is, as the decoder writes them."""
    return Stream(tmp_path / "store" / "changes")


def mirror(config: Config, name: str) -> list[dict[str, Any]]:
    table = open_catalog(config).load_table((config.namespace, f"public__{name}"))
    rows = table.scan().to_arrow().drop_columns(["_cdc_commit_lsn", "_cdc_commit_ts",
                                                 "_cdc_pg_text"])
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


def snapshot(config: Config, name: str) -> int | None:
    table = open_catalog(config).load_table((config.namespace, f"public__{name}"))
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


# -- params -------------------------------------------------------------------------------------


def test_params_from_the_trigger_form() -> None:
    p = RunParams.from_mapping({"end_lsn": "0/5000000", "tables": "public.a, public.b",
                                "dry_run": "true", "until_segment": "", "extra": 1})
    assert (p.end_lsn, p.tables, p.dry_run, p.until_segment) == (
        0x5000000, ("public.a", "public.b"), True, None)
    assert p.to_json()["end_lsn"] == "0/5000000"
    assert RunParams.from_mapping(None) == RunParams()
    assert RunParams.from_mapping({"tables": ["public.a"]}).tables == ("public.a",)


@pytest.mark.parametrize("bad", [{"end_lsn": "5000000"}, {"until_segment": "0001"},
                                 {"tables": "accounts"}, {"start_lsn": "x/y"}])
def test_params_that_cannot_mean_anything_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RunParams.from_mapping(bad)


def test_safe_run_id_makes_airflow_run_ids_usable_as_keys() -> None:
    assert safe_run_id("manual__2025-01-01T00:00:00+00:00") == "manual__2025-01-01T00_00_00_00_00"
    assert safe_run_id(None).startswith("run-")


# -- merge ----------------------------------------------------------------------------------------


def test_merge_takes_every_validated_batch_then_a_rerun_commits_nothing(
        config: Config, stream: Stream) -> None:
    two_batches(stream)
    validate_stream(config)
    result = merge(config)
    assert [b["batch"] for b in result["batches"]] == ["b000001", "b000002"]
    assert result["tables"] == ["public.items", "public.owners"]
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    assert mirror(config, "owners") == [{"id": 11, "email": "y@example.com"}]
    json.dumps(result)

    before = {n: snapshot(config, n) for n in ("items", "owners")}
    again = merge(config)
    assert again["batches"] == [] and again["end_lsn"] == result["end_lsn"]
    assert {n: snapshot(config, n) for n in ("items", "owners")} == before


def test_a_backlog_is_merged_at_once_up_to_merge_max_rows(config: Config,
                                                          stream: Stream) -> None:
    """Consecutive validated batches whose changes fit in ``merge_max_rows`` go in as one
    merge: one commit per table for all of them (a copy-on-write merge rewrites a touched
    file once, not once a batch), the mirrors as merging them one by one leaves them; a
    batch past the bound is merged next."""
    two_batches(stream)
    together = dataclasses.replace(config, merge_max_rows=6)  # b000001 holds 3, b000002 3
    checked = validate_stream(together)  # in the merge's groups, each batch recorded
    assert [(b["batch"], b["decoded_batches"], b["success"]) for b in checked["batches"]] == [
        ("b000001..b000002", ["b000001", "b000002"], True)]
    assert describe("validate_stream", checked) == "2 batch(es) checked"
    result = merge(together)
    assert [b["batch"] for b in result["batches"]] == ["b000001..b000002"]
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    assert mirror(config, "owners") == [{"id": 11, "email": "y@example.com"}]
    for name in ("items", "owners"):
        table = open_catalog(config).load_table((config.namespace, f"public__{name}"))
        assert {s.summary["cdclake.batch"] for s in table.snapshots()} == {"b000001..b000002"}
    assert result["end_lsn"] == format_lsn(list_batches(open_store(config), Layout())[-1].end_lsn)
    assert describe("merge", result).startswith("2 batch(es) merged")
    checked = validate_tables(together, merged=result)  # the mirrors of both batches
    assert checked["tables"] == ["public.items", "public.owners"] and checked["success"]
    assert merge(together)["batches"] == []


def test_a_batch_past_merge_max_rows_is_merged_apart(tmp_path: Path, stream: Stream) -> None:
    config = Config(home=tmp_path / "home", store_url=(tmp_path / "store").as_uri(),
                    merge_max_rows=5)
    two_batches(stream)
    validate_stream(config)
    assert [b["batch"] for b in merge(config)["batches"]] == ["b000001", "b000002"]


def test_merging_some_tables_leaves_the_batches_pending_for_the_others(
        config: Config, stream: Stream) -> None:
    two_batches(stream)
    validate_stream(config)
    some = merge(config, RunParams(tables=("public.items",)))
    assert some["end_lsn"] is None  # the stream is not merged in full yet
    assert {t["table"] for b in some["batches"] for t in b["tables"]} == {"public.items"}
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    assert not open_catalog(config).table_exists((config.namespace, "public__owners"))

    rest = merge(config)
    items_report = [t for b in rest["batches"] for t in b["tables"]
                    if t["table"] == "public.items"]
    assert sum(t["skipped_applied"] for t in items_report) == 3  # already there: not twice
    assert mirror(config, "owners") == [{"id": 11, "email": "y@example.com"}]
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    assert merged_end_lsn(open_catalog(config), config.namespace, config.stream) == \
        list_batches(open_store(config), Layout())[-1].end_lsn


def merge_beside_a_foreign_items_table(config: Config) -> tuple[Catalog, dict[str, Any]]:
    """Validate and merge the stream with a table cdclake did not create where items'
    mirror goes: items' merge fails on the first batch (the others go on)."""
    validate_stream(config)
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists(config.namespace)
    catalog.create_table((config.namespace, "public__items"),
                         Schema(NestedField(1, "id", LongType())))
    result = merge(config)
    assert [(f["table"], f["batch"]) for f in result["failed"]] == [("public.items", "b000001")]
    return catalog, result


def test_a_table_failing_on_a_batch_is_held_back_while_the_others_commit(
        config: Config, stream: Stream) -> None:
    """A table cdclake did not create stands where items' mirror goes: items' merge fails on
    the first batch and is held back on the second (its changes go in order), owners takes
    both, the stream's merged end LSN stays, the step and the console name items, and the
    run fails once its report is written. With the table gone, the next merge catches up."""
    two_batches(stream)
    catalog, result = merge_beside_a_foreign_items_table(config)
    assert [b["held_back"] for b in result["batches"]] == [[], ["public.items"]]
    assert result["end_lsn"] is None and result["tables"] == ["public.owners"]
    assert mirror(config, "owners") == [{"id": 11, "email": "y@example.com"}]
    assert "FAILED (retried by the next run): public.items" in describe("merge", result)
    with pytest.raises(LakeError, match=r"^the merge of 1 table\(s\) failed: public\.items "
                                        r"\(batch b000001: Iceberg table cdc\.public__items "
                                        r"exists but was not created by cdclake.*\); the other "
                                        r"tables committed, and the next run retries it$"):
        raise_for_failed_tables({"merge": result})
    raise_for_failed_tables({"merge": merge(config, RunParams(dry_run=True))})

    catalog.drop_table((config.namespace, "public__items"))
    again = merge(config)
    assert again["failed"] == [] and [b["batch"] for b in again["batches"]] == \
        ["b000001", "b000002"]
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"}]
    assert again["end_lsn"] == format_lsn(list_batches(open_store(config), Layout())[-1].end_lsn)


def test_a_table_that_failed_keeps_the_stream_behind_though_no_later_batch_has_it(
        config: Config, stream: Stream) -> None:
    """items fails on the first batch and the second has no change of it: the second batch
    must not move the merged end LSN past the first (items would never get it)."""
    i, o = items(), owners()
    for name, rows in (("b000001", [(i, 1), (o, 10)]), ("b000002", [(o, 11)])):
        b = stream.batch(name)
        with b.txn() as t:
            for rel, key in rows:
                t.insert(rel, {"id": key, "name": "a"} if rel is i else
                         {"id": key, "email": f"{key}@example.com"})
        b.write()
    catalog, result = merge_beside_a_foreign_items_table(config)
    assert result["end_lsn"] is None and len(mirror(config, "owners")) == 2
    catalog.drop_table((config.namespace, "public__items"))
    again = merge(config)
    assert mirror(config, "items") == [{"id": 1, "name": "a"}] and again["failed"] == []


def test_a_bug_in_one_tables_merge_is_a_bug_once_the_others_committed(
        config: Config, stream: Stream, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """An error nobody foresaw in items' merge: owners still commits, and the run then ends
    as a bug does (exit 1, one line, the traceback in the home's log), not as a LakeError."""
    two_batches(stream)
    real = ArrowMerge.merge_table

    def merge_table(self: ArrowMerge, batch: Any, entry: Any, **kwargs: Any) -> Any:
        if entry.table == "public.items":
            raise KeyError("_cdc_lsn")
        return real(self, batch, entry, **kwargs)

    monkeypatch.setattr(ArrowMerge, "merge_table", merge_table)
    monkeypatch.setenv("CDCLAKE_HOME", str(config.home))
    monkeypatch.setenv("CDCLAKE_STORE_URL", config.store_url)
    monkeypatch.setenv("CDCLAKE_SNAPSHOT_MODE", "never")
    assert main(["run", "--run-id", "bug"]) == 1
    assert mirror(config, "owners") == [{"id": 11, "email": "y@example.com"}]
    log = config.home / "logs" / "cdclake.log"
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == ("cdclake run: internal error: TableMergeBug: the merge of 1 table(s) "
                       "failed: public.items (batch b000001..b000002: internal error: "
                       "KeyError: '_cdc_lsn'); the other tables committed, and the next run "
                       f"retries it (a bug: its traceback is in {log})")
    assert 'raise KeyError("_cdc_lsn")' in log.read_text()


def test_a_dry_run_merge_reports_and_commits_nothing(config: Config, stream: Stream) -> None:
    two_batches(stream)
    validate_stream(config, RunParams(dry_run=True))  # checks, records nothing
    assert not list(open_store(config).list("state/"))
    result = merge(config, RunParams(dry_run=True))
    assert [b["would_merge"] for b in result["batches"]] == [
        {"public.items": 2, "public.owners": 1}, {"public.items": 1, "public.owners": 2}]
    assert [b["validated"] for b in result["batches"]] == [False, False]
    assert not open_catalog(config).table_exists((config.namespace, "public__items"))
    assert validate_tables(config, RunParams(dry_run=True))["skipped"] is True


def test_merge_takes_only_batches_whose_stream_validation_is_recorded(
        config: Config, stream: Stream) -> None:
    """Validation and merge take the lake lease one after the other: between them another run
    decodes batch 3, and decodes batch 2 again. The merge takes batch 1 alone, and says which
    it left; they are merged once validated."""
    two_batches(stream)
    assert [b["success"] for b in validate_stream(config)["batches"]] == [True, True]
    # batch 2 decoded again: another manifest (another decode's parts), not validated
    manifest = Path(stream.root) / "b000002" / "_manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()), indent=2))
    late = stream.batch("b000003")
    with late.txn() as t:
        t.insert(items(), {"id": 4, "name": "unvalidated"})
    late.write()

    result = merge(config)
    assert [b["batch"] for b in result["batches"]] == ["b000001"]
    assert result["not_validated"] == ["b000002", "b000003"]
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert result["end_lsn"] == format_lsn(list_batches(open_store(config), Layout())[0].end_lsn)

    # a validation of some tables does not cover a merge of all of them
    validate_stream(config, RunParams(tables=("public.items",)))
    assert merge(config)["not_validated"] == ["b000002", "b000003"]
    validate_stream(config, RunParams(tables=("public.owners",)))
    result = merge(config)
    assert [b["batch"] for b in result["batches"]] == ["b000002", "b000003"]
    assert result["not_validated"] == []
    assert mirror(config, "items") == [{"id": 1, "name": "a"}, {"id": 3, "name": "b"},
                                       {"id": 4, "name": "unvalidated"}]
    record = json.loads(open_store(config).get(Layout().validated_key("b000002")))
    assert record["tables"] == ["public.items", "public.owners"]  # the two validations
    assert record["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()


# -- quality and report ----------------------------------------------------------------------


def test_a_stream_out_of_commit_order_stops_before_the_merge(config: Config,
                                                             stream: Stream) -> None:
    two_batches(stream)
    assert [b["success"] for b in validate_stream(config)["batches"]] == [True, True]
    # a batch whose file holds two transactions in the wrong order: never merged
    bad = stream.batch("b000003")
    i = items()
    with bad.txn() as t:
        t.insert(i, {"id": 7, "name": "late"})
    with bad.txn() as t:
        t.insert(i, {"id": 8, "name": "later"})
    path = bad.write() / "public.items" / f"v{i.version.valid_from:016X}" / "part-00000.parquet"
    pq.write_table(pq.read_table(path).take([1, 0]), path)
    with pytest.raises(QualityError, match="Commit LSN never goes backwards"):
        validate_stream(config)
    assert merge(config)["not_validated"] == ["b000003"]


def test_report_is_written_beside_the_data_docs_and_to_the_store(config: Config,
                                                                 stream: Stream) -> None:
    two_batches(stream)
    validate_stream(config)
    merged = merge(config)
    checked = validate_tables(config, RunParams(), merged)
    assert checked["success"] and checked["rows"] == {"public.items": 2, "public.owners": 1}
    out = report(config, RunParams(), {"merge": merged, "validate_tables": checked},
                 run_id="manual__1")
    assert out["mirrors"]["public.items"]["rows"] == 2
    assert out["data_docs_index"] and Path(out["data_docs_index"]).exists()
    local = json.loads(Path(out["report_file"]).read_text())
    stored = json.loads(open_store(config).get(Layout().report_key("runs/manual__1.json")))
    assert local == stored and local["merged_end_lsn"] == merged["end_lsn"]


# -- CLI -----------------------------------------------------------------------------------------


def test_cli_run_dry_run_and_status(config: Config, stream: Stream, monkeypatch:
                                    pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    two_batches(stream)
    monkeypatch.setenv("CDCLAKE_HOME", str(config.home))
    monkeypatch.setenv("CDCLAKE_STORE_URL", config.store_url)
    assert main(["run", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"]["decode"]["batch"] is None  # nothing archived: nothing to decode
    assert [b["batch"] for b in out["steps"]["merge"]["batches"]] == ["b000001", "b000002"]
    assert "report_file" not in out  # a dry run writes nothing

    assert not list(open_store(config).list("state/"))  # not even a lease

    assert main(["status"]) == 0
    text = capsys.readouterr().out
    assert "decoded: 2 batch(es), last b000002" in text
    assert "waiting for merge: 2 (b000001, b000002)" in text
    assert "running:" not in text
    with Lease(open_store(config), LAKE, purpose="a merge elsewhere", ttl=60, wait=0):
        assert main(["status"]) == 0
        assert re.search(r"^running: the lake lease is held by a merge elsewhere \(pid \d+ "
                         r"on .*\) until \d{4}-", capsys.readouterr().out, re.M)

    assert main(["run", "--tables", "nodot"]) == 2
    assert "give tables as schema.table" in capsys.readouterr().err


def test_status_only_reads(config: Config) -> None:
    """No catalog file, no catalog tables, no namespace is created by looking."""
    from cdclake.pipeline.status import status

    sqlite = Path(config.effective_catalog_uri().removeprefix("sqlite:///"))
    config.home.mkdir()  # a home with nothing in it yet
    out = status(config)
    assert "nothing was merged" in out["lake"]["error"]
    assert not sqlite.exists()
    catalog = open_catalog(config)  # the catalog exists, the stream's namespace does not
    out = status(config)
    assert out["lake"]["merged_end_lsn"] is None and out["lake"]["mirrors"] == {}
    assert not catalog.namespace_exists(config.namespace)


def test_an_error_nobody_foresaw_is_one_line_the_report_written_the_traceback_kept(
        config: Config, stream: Stream, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A bug (here: a step that raises a KeyError) still gets the run's report, with the
    error, and one line on the terminal (exit 1, not 2: it is not the user's doing); its
    traceback goes to the home's log, not to the terminal."""
    two_batches(stream)
    monkeypatch.setenv("CDCLAKE_HOME", str(config.home))
    monkeypatch.setenv("CDCLAKE_STORE_URL", config.store_url)
    monkeypatch.setenv("CDCLAKE_SNAPSHOT_MODE", "never")

    def validate_stream(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KeyError("_cdc_lsn")

    monkeypatch.setattr(steps, "validate_stream", validate_stream)
    assert main(["run", "--run-id", "bug"]) == 1
    log = config.home / "logs" / "cdclake.log"
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"cdclake run: internal error: KeyError: '_cdc_lsn' (a bug: its "
                       f"traceback is in {log})")
    assert not [line for line in err if line.startswith(("Traceback", " "))]
    report = json.loads((config.home / "reports" / "runs" / "bug.json").read_text())
    assert report["steps"]["error"] == "KeyError: '_cdc_lsn'"
    assert report["steps"]["decode"]["batch"] is None  # the steps before it are there
    text = log.read_text()
    assert "cdclake run --run-id bug\nTraceback (most recent call last):" in text
    assert text.rstrip().endswith("KeyError: '_cdc_lsn'")


# -- no configuration: the defaults are said, a home that is not there is not an empty stream --


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A shell in a directory with no cdclake configuration at all."""
    for key in [k for k in os.environ if k.startswith("CDCLAKE_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_status_where_nothing_ran_is_an_error_not_an_empty_stream(
        nowhere: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 2
    assert capsys.readouterr().err == (
        f"cdclake status: error: no cdclake home at {nowhere / '.cdclake'} (the default: "
        "CDCLAKE_HOME is not set): nothing ran with this configuration here; set "
        "CDCLAKE_HOME (or CDCLAKE_CONFIG) to the home of the stream to look at\n")
    assert list(nowhere.iterdir()) == []  # looking created nothing


def test_a_first_run_with_no_configuration_says_where_it_puts_everything(
        nowhere: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    home = nowhere / ".cdclake"
    assert main(["run", "--dry-run"]) == 0  # first-time use still works
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"cdclake run: using the default home {home} (not there yet: it will be "
                      f"created) and store {(home / 'store').as_uri()}; CDCLAKE_HOME, "
                      "CDCLAKE_STORE_URL or a configuration file choose others")
    assert main(["status"]) == 0  # now there is a home to look at, and it says which
    assert capsys.readouterr().out.splitlines()[0] == (
        f"stream main at {(home / 'store').as_uri()} (home {home})")
    monkeypatch.setenv("CDCLAKE_STORE_URL", (nowhere / "store").as_uri())
    assert main(["run", "--dry-run"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"cdclake run: using the default home {home}; CDCLAKE_HOME or a configuration file "
        "choose others")
    monkeypatch.setenv("CDCLAKE_HOME", str(nowhere / "chosen"))
    assert main(["run", "--dry-run"]) == 0
    assert not capsys.readouterr().err.startswith("cdclake run: using")


def test_status_of_a_new_stream_whose_source_is_unreachable_is_not_stalled(
        config: Config, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where the install's message lies is asked of the source: a source that does not
    answer leaves the next batch unknown (said on the source's line too), not STALLED."""
    store = open_store(config)
    _push(store, 1, 3)
    config.home.mkdir()
    monkeypatch.setenv("CDCLAKE_HOME", str(config.home))
    monkeypatch.setenv("CDCLAKE_STORE_URL", config.store_url)
    monkeypatch.setenv("CDCLAKE_SOURCE_DSN", "host=127.0.0.1 port=1 dbname=none "
                                             "connect_timeout=2")
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "decode: next batch unknown: cannot read where `cdclake source install`" in out
    assert "STALLED" not in out and "source: cannot reach the source" in out


def test_status_says_what_the_next_decode_takes_and_exits_1_when_it_cannot(
        config: Config, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The planner's own answer: the next batch's segments, nothing new, or the hole that
    stops decoding (segment 5 under an archived 6), which makes `cdclake status` exit 1."""
    store = open_store(config)
    for segno in (3, 4, 6):
        _push(store, 1, segno)
    config.home.mkdir()  # a home where a run took place (status refuses one that is not)
    monkeypatch.setenv("CDCLAKE_HOME", str(config.home))
    monkeypatch.setenv("CDCLAKE_STORE_URL", config.store_url)
    assert main(["status"]) == 0
    first, last = (segment_name(1, s, SEGSIZE) for s in (3, 4))
    assert f"decode: next batch {first}..{last} (2 segments)" in capsys.readouterr().out
    save_progress(store, Layout(), _progress(5 * SEGSIZE, 4))
    assert main(["status"]) == 1
    out = capsys.readouterr().out
    hole = segment_name(1, 5, SEGSIZE)
    assert f"decode: STALLED: WAL segment {hole} is missing from the archive" in out
    assert f"GAPS: {hole} missing between archived segments" in out
    store.delete(Layout().manifest_key(segment_name(1, 6, SEGSIZE)))
    assert main(["status"]) == 0
    assert "decode: nothing new to decode" in capsys.readouterr().out
