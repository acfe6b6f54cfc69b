"""validate_stream / validate_mirrors through GX: good data passes, each broken rule fails
with a summary that names suite, expectation, table, column, row count and sample rows."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import QualityError
from cdclake.lsn import format_lsn
from cdclake.quality.context import QualityContext
from cdclake.quality.report import ExpectationOutcome, QualityReport, raise_for_failures
from cdclake.quality.runner import validate_mirror_chunks, validate_mirrors, validate_stream
from tests.support import quality_builders as builders
from tests.support.quality_builders import BIG, Change

ORDERS = "public.orders"


def _only_failures(report: QualityReport) -> dict[str, ExpectationOutcome]:
    assert not report.success
    return {f.check: f for _t, f in report.failures()}


def _stream_one(config: Config, ctx: QualityContext, changes: list[Change],
                rel: RelationVersion | None = None) -> QualityReport:
    rel = rel or builders.relation()
    return validate_stream(config, {ORDERS: builders.stream(rel, changes)}, {ORDERS: rel},
                           context=ctx)


def test_good_streams_pass_and_tables_without_identity_are_reported(
        quality_config: Config, gx_context: QualityContext) -> None:
    default = builders.relation("public.orders")
    index = builders.relation("public.items", replident="i", oid=16501)
    full = builders.relation("public.audit", replident="f", key=(), oid=16502)
    nothing = builders.without_key(builders.relation("public.log", oid=16503), "n")
    no_pk = builders.without_key(builders.relation("public.nopk", oid=16504), "d")
    relations = {r.qualified: r for r in (default, index, full, nothing, no_pk)}
    tables = {
        "public.orders": builders.stream(default, builders.good_changes()),
        "public.items": builders.stream(index, builders.good_changes()),
        "public.audit": builders.stream(full, builders.full_changes()),
        "public.log": builders.stream(nothing, builders.unkeyed_changes()),
        "public.nopk": builders.stream(no_pk, builders.unkeyed_changes()[:2]),
    }
    report = validate_stream(quality_config, tables, relations, run_name="good",
                             context=gx_context)
    assert report.success, report.summary()
    assert report.failures() == []
    assert [t.table for t in report.tables] == sorted(tables)
    # the suite's checks, the identity one (or the two unkeyed counts of a table without one)
    assert {t.table: t.evaluated for t in report.tables} == {
        "public.orders": 8, "public.items": 8, "public.audit": 8, "public.log": 9,
        "public.nopk": 9}
    by_table = {n.table: n for n in report.identity_nothing}
    assert set(by_table) == {"public.log", "public.nopk"}
    assert (by_table["public.log"].unkeyed_updates, by_table["public.log"].unkeyed_deletes) == (
        2, 1)
    assert (by_table["public.nopk"].unkeyed_updates,
            by_table["public.nopk"].unkeyed_deletes) == (1, 0)
    assert by_table["public.nopk"].reason == "REPLICA IDENTITY DEFAULT without a primary key"
    log = next(t for t in report.tables if t.table == "public.log")
    assert log.success and {w.check for w in log.warnings} == {"unkeyed_updates",
                                                               "unkeyed_deletes"}
    assert "reported, not failed: public.log has no replica identity" in report.summary()
    raise_for_failures(report)  # warnings only: no error
    json.dumps(report.to_json())  # JSON-serialisable as it is


def _commit_goes_back(changes: list[Change]) -> list[Change]:
    return changes[4:7] + changes[:4] + changes[7:]  # txn 2 before txn 1


def _lsn_goes_back(changes: list[Change]) -> list[Change]:
    c = list(changes)
    c[4], c[5] = c[5], c[4]  # inside txn 2
    return c


def _seq_goes_back(changes: list[Change]) -> list[Change]:
    c = list(changes)
    c[1], c[2] = c[2], c[1]  # multi-insert tuples 0, 2, 1
    return c


def _duplicate(changes: list[Change]) -> list[Change]:
    return [*changes[:6], changes[5], *changes[6:]]


def _delete_without_old_key(changes: list[Change]) -> list[Change]:
    c = list(changes)
    c[5] = Change("D", c[5].commit_lsn, c[5].lsn, old_key=None)
    return c


def _update_with_null_key(changes: list[Change]) -> list[Change]:
    c = list(changes)
    c[3] = Change("U", c[3].commit_lsn, c[3].lsn, {"id": None, "note": "a2"})
    return c


def _old_key_with_null_column(changes: list[Change]) -> list[Change]:
    c = list(changes)
    c[4] = Change("U", c[4].commit_lsn, c[4].lsn, {"id": 20, "note": "b"},
                  old_key={"id": None})
    return c


@pytest.mark.parametrize(("mutate", "check", "count", "sample"), [
    (_commit_goes_back, "commit_lsn_order", 1,
     {"_commit_lsn": BIG + 500, "_lsn": BIG + 100, "_seq": 0}),
    (_lsn_goes_back, "lsn_order_in_transaction", 1,
     {"_commit_lsn": BIG + 900, "_lsn": BIG + 600, "_seq": 0}),
    (_seq_goes_back, "lsn_order_in_transaction", 1,
     {"_commit_lsn": BIG + 500, "_lsn": BIG + 100, "_seq": 1}),
    (_delete_without_old_key, "identity", 1,
     {"_op": "D", "_old_key": None, "_lsn": BIG + 601}),
    (_update_with_null_key, "identity", 1, {"_op": "U", "id": None, "_lsn": BIG + 101}),
    (_old_key_with_null_column, "identity", 1,
     {"_op": "U", "_old_key": {"id": None}, "_lsn": BIG + 600}),
], ids=lambda v: v.__name__.strip("_") if callable(v) else None)
def test_each_broken_stream_rule_fails_alone_and_precisely(
        quality_config: Config, gx_context: QualityContext,
        mutate: Callable[[list[Change]], list[Change]], check: str, count: int,
        sample: dict) -> None:
    changes = mutate(builders.good_changes())
    report = _stream_one(quality_config, gx_context, changes)
    failures = _only_failures(report)
    assert set(failures) == {check}, report.summary()
    failure = failures[check]
    assert failure.unexpected_count == count
    assert failure.element_count == len(changes)
    assert any(sample.items() <= s.items() for s in failure.samples), failure.samples
    with pytest.raises(QualityError) as info:
        raise_for_failures(report)
    message = str(info.value)
    assert f"suite change_stream, table {ORDERS}: {failure.description}" in message
    assert f"expectation {failure.expectation} on column(s) {', '.join(failure.columns)}" \
        in message
    assert f"{count} of {len(changes)} row(s) unexpected" in message
    assert f"_lsn={format_lsn(sample['_lsn'])}" in message


@pytest.mark.parametrize("column", ["_commit_ts", "_xid"])
def test_a_null_system_column_fails_one_check_whose_sample_shows_it(
        quality_config: Config, gx_context: QualityContext, column: str) -> None:
    rel = builders.relation()
    stream = builders.stream(rel, builders.good_changes())
    values = stream.column(column).to_pylist()
    values[3] = None
    field = stream.schema.field(column)
    stream = stream.set_column(stream.schema.get_field_index(column), field,
                               pa.array(values, field.type))
    report = validate_stream(quality_config, {ORDERS: stream}, {ORDERS: rel}, context=gx_context)
    failures = _only_failures(report)
    assert set(failures) == {"system_not_null"}, report.summary()
    failure = failures["system_not_null"]
    assert failure.expectation == "expect_multicolumn_values_to_not_be_null"
    assert (failure.unexpected_count, failure.element_count) == (1, len(values))
    # the row's columns, the null one null (GX writes a null timestamp as NaT)
    assert [s[column] for s in failure.samples] in ([None], ["NaT"]), failure.samples
    assert "_commit_lsn, _commit_ts, _xid, _lsn, _seq, _op" in report.summary()


def test_a_duplicate_change_breaks_uniqueness_and_strict_order(
        quality_config: Config, gx_context: QualityContext) -> None:
    changes = _duplicate(builders.good_changes())
    failures = _only_failures(_stream_one(quality_config, gx_context, changes))
    assert set(failures) == {"change_unique", "lsn_order_in_transaction"}
    unique = failures["change_unique"]
    assert unique.columns == ["_commit_lsn", "_lsn", "_seq"]
    assert unique.unexpected_count == 2
    assert unique.samples[0] == {"_commit_lsn": BIG + 900, "_lsn": BIG + 601, "_seq": 0}


def test_full_identity_update_without_old_row_fails(
        quality_config: Config, gx_context: QualityContext) -> None:
    rel = builders.relation(replident="f", key=())
    changes = builders.full_changes()
    changes[1] = Change("U", changes[1].commit_lsn, changes[1].lsn, {"id": 1, "note": "b"})
    failures = _only_failures(_stream_one(quality_config, gx_context, changes, rel))
    assert set(failures) == {"identity"}
    assert failures["identity"].unexpected_count == 1
    assert "REPLICA IDENTITY FULL" in failures["identity"].description


def test_missing_system_column_is_named(quality_config: Config,
                                        gx_context: QualityContext) -> None:
    rel = builders.relation()
    table = builders.stream(rel, builders.good_changes()).drop_columns(["_seq"])
    report = validate_stream(quality_config, {ORDERS: table}, {ORDERS: rel}, context=gx_context)
    failures = _only_failures(report)
    assert failures["system_columns"].observed == {"missing": ["_seq"]}
    assert "observed: {'missing': ['_seq']}" in report.summary()


def test_a_table_without_relation_version_is_a_caller_error(quality_config: Config,
                                                            gx_context: QualityContext) -> None:
    rel = builders.relation()
    with pytest.raises(ValueError, match="no relation version given for table"):
        validate_stream(quality_config, {ORDERS: builders.stream(rel, [])}, {},
                        context=gx_context)


# --- mirrors ---------------------------------------------------------------------------------

GOOD_ROWS = [{"id": 1, "note": "a"}, {"id": 2, "note": None}, {"id": 3, "note": "c"}]


def _mirror_one(config: Config, ctx: QualityContext, rows: list[dict],
                rel: RelationVersion | None = None,
                text_type: pa.DataType | None = None) -> QualityReport:
    rel = rel or builders.relation()
    return validate_mirrors(config, {ORDERS: builders.mirror(rel, rows, text_type)},
                            {ORDERS: rel}, context=ctx)


def test_good_mirrors_pass(quality_config: Config, gx_context: QualityContext) -> None:
    single = builders.relation()
    compound = builders.relation("public.lines", key=("id", "note"), oid=16510)
    full = builders.relation("public.audit", replident="f", key=(), oid=16511)
    tables = {
        "public.orders": builders.mirror(single, GOOD_ROWS),
        "public.lines": builders.mirror(compound, [{"id": 1, "note": "a"},
                                                   {"id": 1, "note": "b"}]),
        # FULL tables have no merge key: duplicate rows are legitimate
        "public.audit": builders.mirror(full, [{"id": 1, "note": "a"}, {"id": 1, "note": "a"}]),
    }
    rels = {"public.orders": single, "public.lines": compound, "public.audit": full}
    report = validate_mirrors(quality_config, tables, rels, context=gx_context)
    assert report.success, report.summary()
    assert report.identity_nothing == []


@pytest.mark.parametrize(("rows", "check", "column", "count", "sample"), [
    ([*GOOD_ROWS, {"id": 2, "note": "again", "_cdc_commit_lsn": BIG + 77}], "key_unique", "id",
     2, {"id": 2, "_cdc_commit_lsn": BIG + 77}),
    ([*GOOD_ROWS, {"id": None, "note": "x", "_cdc_commit_lsn": BIG + 78}], "key_not_null", "id",
     1, {"id": None, "_cdc_commit_lsn": BIG + 78}),
    ([*GOOD_ROWS, {"id": 9, "note": "unchanged-toast-datum", "_cdc_commit_lsn": BIG + 79}],
     "no_toast_placeholder", "note", 1, {"note": "unchanged-toast-datum", "id": 9}),
    ([*GOOD_ROWS, {"id": 9, "note": "__debezium_unavailable_value"}],
     "no_toast_placeholder", "note", 1, {"note": "__debezium_unavailable_value", "id": 9}),
], ids=["duplicate-key", "null-key", "toast-placeholder", "debezium-placeholder"])
def test_each_broken_mirror_rule_fails_precisely(
        quality_config: Config, gx_context: QualityContext, rows: list[dict], check: str,
        column: str, count: int, sample: dict) -> None:
    report = _mirror_one(quality_config, gx_context, rows)
    failures = _only_failures(report)
    assert set(failures) == {check}, report.summary()
    failure = failures[check]
    assert failure.columns == [column]
    assert failure.unexpected_count == count
    assert any(sample.items() <= s.items() for s in failure.samples), failure.samples
    message = report.summary()
    assert f"suite mirror_table, table {ORDERS}: {failure.description}" in message
    assert f"{count} of {len(rows)} row(s) unexpected" in message


def test_placeholder_in_iceberg_large_string_and_compound_key_duplicates(
        quality_config: Config, gx_context: QualityContext) -> None:
    rel = builders.relation(key=("id", "note"))
    rows = [{"id": 1, "note": "a"}, {"id": 1, "note": "a"},
            {"id": 2, "note": "unchanged-toast-datum"}]
    failures = _only_failures(_mirror_one(quality_config, gx_context, rows, rel,
                                          pa.large_string()))
    assert set(failures) == {"key_unique", "no_toast_placeholder"}
    assert failures["key_unique"].columns == ["id", "note"]
    assert failures["key_unique"].unexpected_count == 2


@pytest.mark.parametrize("key", [("id",), ("id", "note")], ids=["single", "compound"])
def test_a_key_in_two_chunks_of_a_mirror_is_a_duplicate(
        quality_config: Config, gx_context: QualityContext, key: tuple[str, ...]) -> None:
    """The key (2, "b") in chunks 1 and 3 is the whole table's duplicate, found across
    chunks; (3, "c") twice in chunk 2 is that chunk's own, and a null key the not-null
    check's."""
    rel = builders.relation(key=key)
    parts = [[{"id": 1, "note": "a"}, {"id": 2, "note": "b"}],
             [{"id": 3, "note": "c"}, {"id": None, "note": "x"}, {"id": 3, "note": "c"}],
             [{"id": 2, "note": "b"}, {"id": 4, "note": "d"}]]
    report = validate_mirror_chunks(
        quality_config, ((ORDERS, rel, builders.mirror(rel, rows)) for rows in parts),
        context=gx_context)
    assert [t.table for t in report.tables] == [ORDERS, f"{ORDERS}#2", f"{ORDERS}#3"]
    assert [t.rows for t in report.tables] == [2, 3, 2]
    first, second, third = report.tables
    assert third.success and not first.success
    across = first.failures[0]
    assert (across.check, across.columns) == ("key_unique", list(key))
    assert (across.unexpected_count, across.element_count) == (2, 6)
    assert across.samples == [{"id": 2, **({"note": "b"} if len(key) > 1 else {}), "rows": 2}]
    assert {f.check for f in second.failures} == {"key_not_null", "key_unique"}
    # the same chunks without the repeated key: nothing across them
    parts[2][0]["id"] = 5
    clean = validate_mirror_chunks(
        quality_config, ((ORDERS, rel, builders.mirror(rel, rows)) for rows in parts[::2]),
        context=gx_context)
    assert clean.success, clean.summary()


def test_a_mirror_marked_inexact_warns_and_passes(quality_config: Config,
                                                 gx_context: QualityContext) -> None:
    """The merge's mark (cdclake.lake.inexact) fails the mirror_exact check as a warning:
    the run goes on, the summary says it with the count; an unmarked mirror passes it."""
    rel = builders.relation()
    mark = {"not_applied": 7, "since_lsn": "0/3000060"}
    marked = validate_mirror_chunks(
        quality_config, [(ORDERS, rel, builders.mirror(rel, GOOD_ROWS))], context=gx_context,
        inexact={ORDERS: mark})
    assert marked.success and marked.failures() == []
    (warning,) = marked.tables[0].warnings
    assert (warning.check, warning.observed) == ("mirror_exact", 7)
    assert warning.severity == "warning"
    assert (f"- warning, not failed: suite mirror_table, table {ORDERS}: Mirror {ORDERS} "
            "holds every change of its source") in marked.summary()
    plain = _mirror_one(quality_config, gx_context, GOOD_ROWS, rel)
    assert plain.tables[0].warnings == [] and "warning" not in plain.summary()


def test_mirror_without_commit_lsn_column_fails(quality_config: Config,
                                                gx_context: QualityContext) -> None:
    rel = builders.relation()
    table = builders.mirror(rel, GOOD_ROWS).drop_columns(["_cdc_commit_lsn"])
    report = validate_mirrors(quality_config, {ORDERS: table}, {ORDERS: rel},
                              context=gx_context)
    failures = _only_failures(report)
    assert failures["mirror_system_columns"].observed == {"missing": ["_cdc_commit_lsn"]}


# --- Data Docs and quiet runs ----------------------------------------------------------------


def test_data_docs_index_lists_both_suites_under_reports(
        quality_config: Config, capfd: pytest.CaptureFixture[str]) -> None:
    """Runs without a shared context too: the context is opened from the configuration."""
    rel = builders.relation("public.docs", oid=16520)
    capfd.readouterr()
    stream_report = validate_stream(quality_config, {"public.docs": builders.stream(
        rel, builders.good_changes())}, {"public.docs": rel}, run_name="docs-run")
    mirror_report = validate_mirrors(quality_config, {
        "public.docs": builders.mirror(rel, GOOD_ROWS)}, {"public.docs": rel})
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # no progress bars, no prints
    index = quality_config.reports_path() / "data_docs" / "index.html"
    assert stream_report.data_docs_index == mirror_report.data_docs_index == str(index)
    html = index.read_text()
    stream = quality_config.stream
    assert f"change_stream.{stream}.public.docs" in html
    assert f"mirror_table.{stream}.public.docs" in html
    assert "docs-run" in html
    page = stream_report.tables[0].data_docs_page
    assert page is not None and Path(page).is_file()
    assert Path(page).is_relative_to(quality_config.reports_path() / "data_docs")
    assert "Every UPDATE and DELETE of public.docs carries its replica identity" in \
        Path(page).read_text()


def test_data_docs_templates_compile_once_per_process(tmp_path: Path) -> None:
    """Each home's context renders its pages through views whose Jinja environments share
    the process's compiled templates: a second home compiles none of GX's template files
    again (the one compile left is a template GX makes from a string). The contexts read no
    config variables file."""
    import jinja2

    compiled: list[str | None] = []
    compile_ = jinja2.Environment._compile

    def counted(self: jinja2.Environment, source: str, filename: str) -> object:
        compiled.append(filename)
        return compile_(self, source, filename)

    rel = builders.relation("public.views", oid=16521)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jinja2.Environment, "_compile", counted)
        for home in ("a", "b"):
            compiled.clear()
            config = Config(home=tmp_path / home)
            report = validate_stream(config, {"public.views": builders.stream(
                rel, builders.good_changes())}, {"public.views": rel})
            page = Path(report.tables[0].data_docs_page or "")
            assert "Every UPDATE and DELETE of public.views carries its replica identity" in \
                page.read_text()
            gx_yml = (config.reports_path() / "gx" / "great_expectations.yml").read_text()
            assert "config_variables_file_path: uncommitted" not in gx_yml
            assert "cdclake.quality.views" in gx_yml
    assert not [f for f in compiled if f and f.endswith(".j2")], compiled


def test_a_backlog_renders_its_data_docs_once(quality_config: Config,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch after batch inside ``publishing_once``: each report names the pages its
    results get, and the site (whose index reads every stored result) is rendered once, at
    the end — also when a batch fails, so the failure has its page."""
    ctx = QualityContext.for_config(quality_config)
    rendered: list[int] = []
    build = ctx.gx.build_data_docs
    monkeypatch.setattr(ctx.gx, "build_data_docs", lambda **kw: (
        rendered.append(len(kw["resource_identifiers"])), build(**kw))[1])
    rel = builders.relation("public.backlog", oid=16530)
    bad = [Change("I", BIG + 9, BIG + 1, {"id": 1, "note": "a"}),
           Change("I", BIG + 8, BIG + 2, {"id": 2, "note": "b"})]  # commit order broken
    reports = []
    with pytest.raises(QualityError), ctx.publishing_once():
        for name, changes in (("b1", builders.good_changes()), ("b2", builders.good_changes()),
                              ("b3", bad)):
            report = validate_stream(quality_config, {"public.backlog": builders.stream(
                rel, changes)}, {"public.backlog": rel}, run_name=name, context=ctx)
            reports.append(report)
            assert rendered == []
            raise_for_failures(report)
    assert rendered == [3 + 1]  # three results and their suite, in one rendering
    pages = [r.tables[0].data_docs_page for r in reports]
    assert all(p is not None and Path(p).is_file() for p in pages) and len(set(pages)) == 3
    assert reports[2].data_docs_index == str(ctx.data_docs_index)
    ctx.publish([])  # outside: nothing to render
    assert rendered == [4]


def test_a_backlog_longer_than_the_results_kept_renders_the_newest(
        quality_config: Config, tmp_path: Path) -> None:
    """More results of a table inside ``publishing_once`` than the context keeps: the older
    are pruned before the rendering, which renders the newest."""
    ctx = QualityContext(tmp_path / "reports", keep_results=1)
    rel = builders.relation("public.kept", oid=16531)
    reports = []
    with ctx.publishing_once():
        for name in ("k1", "k2"):
            reports.append(validate_stream(quality_config, {"public.kept": builders.stream(
                rel, builders.good_changes())}, {"public.kept": rel}, run_name=name,
                context=ctx))
    old, new = (r.tables[0].data_docs_page for r in reports)
    assert new is not None and Path(new).is_file()
    assert old is not None and not Path(old).exists()


def test_empty_inputs_pass(quality_config: Config, gx_context: QualityContext) -> None:
    """A batch in which a table has no changes, and an empty mirror, are not failures."""
    rel = builders.relation()
    stream_report = _stream_one(quality_config, gx_context, [])
    assert stream_report.success, stream_report.summary()
    assert stream_report.tables[0].rows == 0
    mirror_report = _mirror_one(quality_config, gx_context, [], rel)
    assert mirror_report.success, mirror_report.summary()
    nothing_report = validate_stream(quality_config, {}, {}, context=gx_context)
    assert nothing_report.success and nothing_report.tables == []


def test_a_table_rewrite_passes_the_stream_suite(quality_config: Config,
                                                  gx_context: QualityContext) -> None:
    """ALTER TABLE rewrites and REFRESH: the W marker (_seq -1, no identity) and R rows."""
    changes = [
        Change("I", BIG + 500, BIG + 100, {"id": 1, "note": "a"}),
        Change("W", BIG + 500, BIG + 200, seq=-1),
        Change("R", BIG + 500, BIG + 200, {"id": 1, "note": "a"}),
        Change("R", BIG + 500, BIG + 201, {"id": 2, "note": "b"}),
        Change("U", BIG + 500, BIG + 300, {"id": 2, "note": "b2"}),
    ]
    report = _stream_one(quality_config, gx_context, changes)
    assert report.success, report.summary()


def test_chunks_of_a_stream_are_checked_as_one_and_where_they_meet(
        quality_config: Config, gx_context: QualityContext) -> None:
    from cdclake.quality.runner import validate_stream_chunks

    rel = builders.relation()
    changes = builders.good_changes()
    whole = builders.stream(rel, changes)
    # split inside txn 1 (same commit LSN on both sides) and between txns 2 and 3
    chunks = [(ORDERS, rel, whole.slice(0, 2)), (ORDERS, rel, whole.slice(2, 5)),
              (ORDERS, rel, whole.slice(7))]  # rows 0-1, 2-6, 7
    report = validate_stream_chunks(quality_config, chunks, run_name="chunks",
                                    context=gx_context)
    assert report.success, report.summary()
    assert [(t.table, t.rows) for t in report.tables] == [
        (ORDERS, 2), (f"{ORDERS}#2", 5), (f"{ORDERS}#3", 1)]
    # one set of GX objects for the table, a Data Docs page per chunk
    assert {t.gx_suite for t in report.tables} == {report.tables[0].gx_suite}
    pages = [t.data_docs_page for t in report.tables]
    assert all(pages) and len(set(pages)) == 3, pages

    # each chunk in order on its own, but the second starts before the first ends
    swapped = [(ORDERS, rel, whole.slice(1, 1)), (ORDERS, rel, whole.slice(0, 1))]
    failed = validate_stream_chunks(quality_config, swapped, context=gx_context)
    assert [t.success for t in failed.tables] == [True, False]
    outcome = failed.tables[1].failures[0]
    assert outcome.check == "lsn_order_in_transaction"  # both rows are of txn 1
    assert [s["_seq"] for s in outcome.samples] == [1, 0]
    with pytest.raises(QualityError, match="where two chunks of the table's changes meet"):
        raise_for_failures(failed)
    later_first = [(ORDERS, rel, whole.slice(7)), (ORDERS, rel, whole.slice(0, 4))]
    (_, second) = validate_stream_chunks(quality_config, later_first,
                                         context=gx_context).tables
    assert second.failures[0].check == "commit_lsn_order"


def test_a_context_keeps_each_tables_newest_results_and_stores_its_objects_once(
        quality_config: Config) -> None:
    """A follower checks every few seconds: the index must not grow without end, and the
    suite and its validation definition are written once, not at every check."""
    ctx = QualityContext(quality_config.reports_path(), keep_results=2)
    rel = builders.relation("public.kept", oid=16530)
    reports = [validate_stream(quality_config, {"public.kept": builders.stream(
        rel, builders.good_changes())}, {"public.kept": rel}, run_name=f"run-{i}",
        context=ctx) for i in range(4)]
    assert all(r.success for r in reports)
    stored = [k for k in ctx.gx.validation_results_store.list_keys()
              if k.expectation_suite_identifier.name.endswith(".public.kept")]
    assert sorted(k.run_id.run_name for k in stored) == ["run-2", "run-3"]
    pages = [r.tables[0].data_docs_page for r in reports]
    assert [Path(p).is_file() for p in pages if p] == [False, False, True, True]
    html = Path(reports[-1].data_docs_index or "").read_text()
    assert "run-3" in html and "run-0" not in html
    suite = ctx.gx.root_directory + "/expectations"
    written = {p: p.stat().st_mtime_ns for p in Path(suite).rglob("*.json")}
    validate_stream(quality_config, {"public.kept": builders.stream(
        rel, builders.good_changes())}, {"public.kept": rel}, run_name="run-4", context=ctx)
    assert written and {p: p.stat().st_mtime_ns for p in written} == written


def test_a_process_opens_a_reports_directorys_context_once(tmp_path: Path) -> None:
    """The two checks of a run (and a test's phases) share the context: GX's context is
    opened, and each suite stored, once; a reports directory removed meanwhile gets a new one."""
    config = Config(home=tmp_path / "home")
    first = QualityContext.for_config(config)
    assert QualityContext.for_config(config) is first
    shutil.rmtree(config.reports_path())
    again = QualityContext.for_config(config)
    assert again is not first
    assert (Path(again.gx.root_directory) / "great_expectations.yml").exists()
