"""QualityReport: JSON round trip, the readable summary, when a task fails."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import QualityError
from cdclake.quality.report import (
    ExpectationOutcome,
    IdentityNothingTable,
    QualityReport,
    TableResult,
    format_sample,
    raise_for_failures,
)


def _outcome(severity: str = "critical") -> ExpectationOutcome:
    return ExpectationOutcome(
        check="commit_lsn_order", expectation="expect_column_values_to_be_increasing",
        description="Commit LSN never goes backwards", columns=["_commit_lsn"],
        severity=severity, unexpected_count=1, element_count=8,
        samples=[{"_commit_lsn": (0x16 << 32) | 0xB374D848, "_lsn": 0x1500800, "_seq": 0}],
    )


def _report(failures: list[ExpectationOutcome], warnings: list[ExpectationOutcome],
            nothing: list[IdentityNothingTable] | None = None) -> QualityReport:
    table = TableResult(suite="change_stream", table="public.orders",
                        gx_suite="change_stream.main.public.orders", success=not failures, rows=8,
                        evaluated=13, replica_identity="d", key_columns=["id"],
                        failures=failures, warnings=warnings)
    return QualityReport(suite="change_stream", run_name="b1", success=not failures,
                         tables=[table], identity_nothing=nothing or [],
                         data_docs_index="/r/data_docs/index.html")


def test_round_trips_through_json() -> None:
    report = _report([_outcome()], [_outcome("warning")],
                     [IdentityNothingTable("public.log", "n", "REPLICA IDENTITY NOTHING", 2, 1)])
    again = QualityReport.from_json(json.loads(report.dumps()))
    assert again == report


def test_summary_says_which_suite_table_expectation_rows_and_samples() -> None:
    text = _report([_outcome()], []).summary()
    assert "quality check failed: 1 expectation(s) of suite change_stream" in text
    assert "suite change_stream, table public.orders: Commit LSN never goes backwards" in text
    assert "expectation expect_column_values_to_be_increasing on column(s) _commit_lsn" in text
    assert "1 of 8 row(s) unexpected" in text
    assert "{_commit_lsn=16/B374D848, _lsn=0/1500800, _seq=0}" in text
    assert "Data Docs: /r/data_docs/index.html" in text


def test_failures_raise_with_the_summary_and_warnings_do_not() -> None:
    failing = _report([_outcome()], [])
    with pytest.raises(QualityError) as info:
        raise_for_failures(failing)
    assert str(info.value) == failing.summary()
    warned = _report([], [_outcome("warning")],
                     [IdentityNothingTable("public.log", "n", "REPLICA IDENTITY NOTHING", 2, 1)])
    raise_for_failures(warned)  # must not raise
    assert "public.log has no replica identity (REPLICA IDENTITY NOTHING): 2 update(s) and " \
        "1 delete(s) carry no key" in warned.summary()


def test_samples_print_lsns_like_postgresql_and_other_values_as_they_are() -> None:
    assert format_sample({"_cdc_commit_lsn": 1 << 32, "id": 5, "flag_lsn": True,
                          "note": "x"}) == "{_cdc_commit_lsn=1/0, id=5, flag_lsn=True, note='x'}"
