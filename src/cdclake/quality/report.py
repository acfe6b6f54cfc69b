"""The outcome of a quality run, in a form Airflow, the CLI and people can all read.

GX's own result objects are large, tied to a Data Context and awkward to pass between tasks;
a :class:`QualityReport` keeps only what an operator acts on (which suite, which table, which
expectation, how many rows, a few sample rows) and round-trips through JSON so a DAG can push
it to XCom or the object store. Data Docs stay the place for the full picture.

Severity follows GX's own ``FailureSeverity``: a failed ``critical`` expectation fails the
task; a failed ``warning`` expectation is reported only. The change-stream suite uses warnings
for tables with REPLICA IDENTITY NOTHING, whose updates and deletes cannot carry a key by
PostgreSQL's design.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cdclake.errors import QualityError
from cdclake.lsn import format_lsn

SEVERITY_CRITICAL = "critical"
SEVERITY_WARNING = "warning"

#: How many sample rows a summary prints per failed expectation.
SUMMARY_SAMPLES = 3


@dataclass(slots=True)
class ExpectationOutcome:
    """One failed expectation of one table (passing ones live in Data Docs only)."""

    check: str  #: the stable check id from the suite file (``meta.cdclake.check``)
    expectation: str  #: GX expectation type, e.g. ``expect_column_values_to_be_increasing``
    description: str  #: the suite's human sentence for the check
    columns: list[str]  #: the column(s) the expectation looks at
    severity: str  #: ``critical`` fails the task, ``warning`` is reported only
    unexpected_count: int | None = None  #: rows that broke the expectation (map expectations)
    element_count: int | None = None  #: rows the expectation looked at
    samples: list[dict[str, Any]] = field(default_factory=list)  #: a few offending rows
    observed: Any = None  #: for table-level expectations: what GX observed instead
    exception: str | None = None  #: GX could not evaluate the expectation at all


@dataclass(slots=True)
class TableResult:
    """One suite run against one table's data."""

    suite: str  #: suite file name: ``change_stream`` or ``mirror_table``
    table: str  #: ``schema.name`` as given by the caller
    gx_suite: str  #: the concrete GX suite name (suite + table)
    success: bool  #: no critical expectation failed
    rows: int
    evaluated: int  #: expectations evaluated
    replica_identity: str  #: effective identity: d, i, f or n
    key_columns: list[str]
    failures: list[ExpectationOutcome] = field(default_factory=list)  #: critical only
    warnings: list[ExpectationOutcome] = field(default_factory=list)
    data_docs_page: str | None = None  #: the validation page of this table in Data Docs


@dataclass(slots=True)
class IdentityNothingTable:
    """A table whose updates/deletes carry no key: reported so someone fixes the source."""

    table: str
    declared_replica_identity: str  #: relreplident as captured: n, or d/i without an index
    reason: str
    unkeyed_updates: int | None  #: None: could not be counted (see the table's failures)
    unkeyed_deletes: int | None


@dataclass(slots=True)
class QualityReport:
    """All tables of one validation run of one suite."""

    suite: str
    run_name: str
    success: bool
    tables: list[TableResult] = field(default_factory=list)
    identity_nothing: list[IdentityNothingTable] = field(default_factory=list)
    data_docs_index: str | None = None

    def failures(self) -> list[tuple[TableResult, ExpectationOutcome]]:
        return [(t, f) for t in self.tables for f in t.failures]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QualityReport:
        tables = [
            TableResult(
                **{
                    **t,
                    "failures": [ExpectationOutcome(**f) for f in t["failures"]],
                    "warnings": [ExpectationOutcome(**w) for w in t["warnings"]],
                }
            )
            for t in data["tables"]
        ]
        nothing = [IdentityNothingTable(**n) for n in data["identity_nothing"]]
        rest = {k: v for k, v in data.items() if k not in ("tables", "identity_nothing")}
        return cls(**rest, tables=tables, identity_nothing=nothing)

    def summary(self) -> str:
        """What failed, where, how often and on which rows: the text of a failed task."""
        failures = self.failures()
        if failures:
            head = (f"quality check failed: {len(failures)} expectation(s) of suite "
                    f"{self.suite} failed")
        else:
            head = f"quality check passed: suite {self.suite}, {len(self.tables)} table(s)"
        lines = [f"{head} (run {self.run_name})"]
        for table, outcome in failures:
            lines.extend(_describe(table, outcome))
        reported = {n.table for n in self.identity_nothing}  # their warnings, in one line
        for table in self.tables:
            for outcome in table.warnings if table.table not in reported else ():
                first, *rest = _describe(table, outcome)
                lines += [f"- warning, not failed: {first.removeprefix('- ')}", *rest]
        for n in self.identity_nothing:
            lines.append(
                f"- reported, not failed: {n.table} has no replica identity ({n.reason}): "
                f"{_count(n.unkeyed_updates)} update(s) and {_count(n.unkeyed_deletes)} "
                "delete(s) carry no key"
            )
        if self.data_docs_index:
            lines.append(f"Data Docs: {self.data_docs_index}")
        return "\n".join(lines)


def raise_for_failures(report: QualityReport) -> None:
    """Fail the task when a critical expectation failed; warnings never raise."""
    if not report.success:
        raise QualityError(report.summary())


def _count(n: int | None) -> str:
    return "an unknown number of" if n is None else str(n)


def _describe(table: TableResult, outcome: ExpectationOutcome) -> list[str]:
    where = f"suite {table.suite}, table {table.table}"
    cols = f" on column(s) {', '.join(outcome.columns)}" if outcome.columns else ""
    lines = [f"- {where}: {outcome.description}",
             f"  expectation {outcome.expectation}{cols}"]
    if outcome.exception:
        lines.append(f"  could not be evaluated: {outcome.exception}")
    elif outcome.unexpected_count is not None:
        of = f" of {outcome.element_count}" if outcome.element_count is not None else ""
        lines.append(f"  {outcome.unexpected_count}{of} row(s) unexpected")
    elif outcome.observed is not None:
        lines.append(f"  observed: {outcome.observed}")
    if outcome.samples:
        shown = "; ".join(format_sample(s) for s in outcome.samples[:SUMMARY_SAMPLES])
        more = len(outcome.samples) - SUMMARY_SAMPLES
        lines.append(f"  sample rows: {shown}" + (f" (+{more} more)" if more > 0 else ""))
    return lines


def format_sample(row: Mapping[str, Any]) -> str:
    """LSN columns print as PostgreSQL prints them (``0/1500800``), so they can be grepped."""
    parts = []
    for name, value in row.items():
        if name.endswith("lsn") and isinstance(value, int) and not isinstance(value, bool):
            parts.append(f"{name}={format_lsn(value)}")
        else:
            parts.append(f"{name}={value!r}")
    return "{" + ", ".join(parts) + "}"
