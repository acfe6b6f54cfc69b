"""Validate a batch's change stream, or the mirror tables, with the suites in ``expectations/``.

One call validates every table given, each with the suite instantiated for that table, in one
GX run (one run id, so Data Docs group them), and returns a :class:`QualityReport`. GX names
(suites, validation definitions, Data Docs pages) are ``<suite>.<stream>.<schema>.<table>``:
the reports directory belongs to a home that several streams may share. Failing is the caller's
decision: :func:`~cdclake.quality.report.raise_for_failures` turns critical failures into a
``QualityError`` with a readable summary; tables without replica identity are only reported.

GX takes seconds to import, so it is imported here lazily, on the first validation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from cdclake.catalog.model import IDENTITY_NOTHING, RelationVersion
from cdclake.config import Config
from cdclake.quality import crosskeys, inputs, outcomes
from cdclake.quality.context import QualityContext, gx_name, is_spark
from cdclake.quality.report import IdentityNothingTable, QualityReport, TableResult
from cdclake.quality.suites import CHANGE_STREAM, MIRROR_TABLE, build_suite, expand, load_template

#: Offending rows GX returns per failed expectation (it counts all of them regardless).
SAMPLE_ROWS = 5


def validate_stream(config: Config, tables: Mapping[str, pa.Table],
                    relations: Mapping[str, RelationVersion], *, run_name: str | None = None,
                    context: QualityContext | None = None) -> QualityReport:
    """Check each table's change stream (system columns, order, uniqueness, identity).

    ``tables`` maps ``schema.name`` to that table's changes in stream order (the Parquet files
    of the batch, concatenated in order); ``relations`` gives each table's relation version.
    """
    return _validate(CHANGE_STREAM, config, tables, relations, run_name, context)


def validate_mirrors(config: Config, tables: Mapping[str, pa.Table | Any],
                     relations: Mapping[str, RelationVersion], *, run_name: str | None = None,
                     context: QualityContext | None = None) -> QualityReport:
    """Check each mirror table (key unique and not null, no TOAST placeholder left), given
    as Arrow or as a Spark DataFrame (GX's Spark engine: the rows stay on the executors)."""
    _relations_for(tables, relations)
    return validate_mirror_chunks(config, ((t, relations[t], tables[t]) for t in sorted(tables)),
                                  run_name=run_name, context=context)


def validate_mirror_chunks(config: Config,
                           chunks: Iterable[tuple[str, RelationVersion, pa.Table | Any]], *,
                           run_name: str | None = None,
                           context: QualityContext | None = None,
                           inexact: Mapping[str, Mapping[str, Any]] | None = None
                           ) -> QualityReport:
    """:func:`validate_mirrors` over consecutive chunks of each mirror (as
    :func:`cdclake.lake.tables.mirror_chunks` reads them), one chunk in memory at a time.

    The suite runs on every chunk (``table#2``, … as in :func:`validate_stream_chunks`). A
    key held in two chunks is a duplicate no chunk's check sees: the key columns of a table's
    chunks are spilled to local files (:mod:`cdclake.quality.crosskeys`) and checked across
    them once its last chunk is done, in memory bounded by ``quality_chunk_rows``.
    ``inexact``: the marks of the mirrors the merge knows to differ, by table
    (:mod:`cdclake.lake.inexact`): their ``mirror_exact`` check fails (a warning)."""
    run = _Run(MIRROR_TABLE, config, run_name, context, inexact)
    seen: dict[str, int] = {}
    spills: dict[str, crosskeys.KeySpill] = {}
    firsts: dict[str, TableResult] = {}  #: each table's first chunk's result
    try:
        for table, relation, data in chunks:
            seen[table] = seen.get(table, 0) + 1
            result = run.table(table, data, relation, chunk=seen[table])
            firsts.setdefault(table, result)
            if (not is_spark(data) and result.key_columns
                    and set(result.key_columns) <= set(data.column_names)):
                if table not in spills:
                    for done in list(spills):  # a mirror's chunks come one after another
                        _keys_across(firsts[done], spills.pop(done))
                    spills[table] = crosskeys.KeySpill(config.spill_path() / "quality",
                                                       config.quality_chunk_rows)
                spills[table].add(crosskeys.key_table(data, result.key_columns, seen[table]))
            del data  # freed before the next chunk is read, not after
        for table in list(spills):
            _keys_across(firsts[table], spills.pop(table))
    finally:
        for spill in spills.values():
            spill.close()
    return run.report()


def _keys_across(first: TableResult, spill: crosskeys.KeySpill) -> None:
    """A key in more than one of the mirror's chunks: a failure of its first chunk."""
    try:
        across = outcomes.keys_across(first.key_columns, *spill.repeated(SAMPLE_ROWS))
    finally:
        spill.close()
    if across is not None:
        first.failures.insert(0, across)
        first.success = False


def validate_stream_chunks(config: Config,
                           chunks: Iterable[tuple[str, RelationVersion, pa.Table]], *,
                           run_name: str | None = None,
                           context: QualityContext | None = None) -> QualityReport:
    """:func:`validate_stream` over consecutive chunks of each table's changes (as
    :func:`cdclake.lake.pending.stream_chunks` reads them), one chunk in memory at a time.

    The suite runs on every chunk (a table's second and later chunks are ``table#2``, … in
    the report, and runs ``<run>#2``, … of the table's suite in Data Docs: the GX objects are
    the table's, however many chunks it has); where two chunks of a table meet, their last and
    first rows must follow the stream's order too, which with the per-chunk checks makes the
    order and uniqueness checks those of the whole batch."""
    run = _Run(CHANGE_STREAM, config, run_name, context)
    last: dict[str, tuple[int, int, int]] = {}
    seen: dict[str, int] = {}
    for table, relation, data in chunks:
        seen[table] = seen.get(table, 0) + 1
        result = run.table(table, data, relation, chunk=seen[table])
        if data.num_rows:
            first = _order_key(data, 0)
            if table in last:
                broken = outcomes.order_across(last[table], first)
                if broken is not None:
                    result.failures.insert(0, broken)
                    result.success = False
            last[table] = _order_key(data, data.num_rows - 1)
        del data  # freed before the next chunk is read, not after
    run.nothing = outcomes.combine_nothing(run.nothing)
    return run.report()


def _order_key(data: pa.Table, row: int) -> tuple[int, int, int]:
    commit, lsn, seq = (data.column(c)[row].as_py() for c in inputs.STREAM_ROW_LOCATOR)
    return commit, lsn, seq


def _validate(suite: str, config: Config, tables: Mapping[str, pa.Table],
              relations: Mapping[str, RelationVersion], run_name: str | None,
              context: QualityContext | None) -> QualityReport:
    _relations_for(tables, relations)
    run = _Run(suite, config, run_name, context)
    for table in sorted(tables):
        run.table(table, tables[table], relations[table])
    return run.report()


def _relations_for(tables: Mapping[str, Any], relations: Mapping[str, RelationVersion]) -> None:
    missing = sorted(set(tables) - set(relations))
    if missing:
        raise ValueError(f"no relation version given for table(s) {', '.join(missing)}: "
                         "the suites need each table's replica identity and key")


class _Run:
    """One GX run (one run id, so Data Docs group its tables) of one suite."""

    def __init__(self, suite: str, config: Config, run_name: str | None,
                 context: QualityContext | None,
                 inexact: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.started = datetime.now(UTC)
        self.suite, self.config = suite, config
        self.run_name = run_name or f"{suite}-{self.started:%Y%m%dT%H%M%S%fZ}"
        self.gx_context = context or QualityContext.for_config(config)
        self.template = load_template(suite)
        self.results: list[TableResult] = []
        self.keys: list[Any] = []  #: each result's key in the context's store
        self.nothing: list[IdentityNothingTable] = []
        self.inexact = inexact or {}

    def table(self, table: str, data: pa.Table | Any, relation: RelationVersion, *,
              chunk: int = 1) -> TableResult:
        """Validate ``data`` as ``table`` (its ``chunk``-th chunk: reported as ``table#N``,
        a run ``<run>#N`` in Data Docs)."""
        from great_expectations.core.run_identifier import RunIdentifier

        suite, config = self.suite, self.config
        label = table if chunk == 1 else f"{table}#{chunk}"
        run_id = RunIdentifier(run_name=self.run_name if chunk == 1 else
                               f"{self.run_name}#{chunk}", run_time=self.started)
        identity = inputs.identity_of(relation)
        if suite == CHANGE_STREAM:
            params = inputs.stream_parameters(table, identity)
            columns = inputs.stream_columns(identity)
            locator = list(inputs.STREAM_ROW_LOCATOR)
        else:
            params = inputs.mirror_parameters(table, identity, data.schema,
                                              self.inexact.get(table))
            columns = inputs.mirror_columns(params)
            locator = inputs.mirror_row_locator(params)
        if is_spark(data):  # the mirror suite on Spark: a projection, nothing collected
            if suite == CHANGE_STREAM:
                raise TypeError("the change-stream suite checks row order: give it Arrow")
            frame = data.select(*(f"`{c}`" for c in dict.fromkeys(columns)
                                  if c in data.columns))
            rows = frame.count()
        else:
            frame = inputs.to_frame(data, columns, identity)
            rows = len(frame)
        name = gx_name(suite, config.stream, table)
        expanded = expand(self.template, params, suite_name=name)
        gx_suite = build_suite(expanded)
        validation, key = self.gx_context.validate(
            suite=gx_suite, asset=name, frame=frame,
            result_format=_result_format([c for c in locator if c in frame.columns]),
            run_id=run_id,
        )
        as_json = validation.to_json_dict()
        result = outcomes.table_result(
            suite=suite, table=label, gx_suite=name, replica_identity=identity.effective,
            key_columns=params["key_columns"], rows=rows, validation=as_json,
            data_docs_page=None, check_order=[e["meta"]["cdclake"].get("check", "")
                                              for e in expanded["expectations"]],
        )
        self.results.append(result)
        self.keys.append(key)
        if suite == CHANGE_STREAM and identity.effective == IDENTITY_NOTHING:
            self.nothing.append(outcomes.identity_nothing(
                table, identity.declared, identity.reason, as_json))
        return result

    def report(self) -> QualityReport:
        """The run's report, once its Data Docs pages are rendered (all at once)."""
        for result, page in zip(self.results, self.gx_context.publish(self.keys), strict=True):
            result.data_docs_page = page
        context = self.gx_context
        return QualityReport(
            suite=self.suite,
            run_name=self.run_name,
            success=all(r.success for r in self.results),
            tables=self.results,
            identity_nothing=self.nothing,
            data_docs_index=str(context.data_docs_index) if context.publishes_index else None,
        )


def _result_format(locator: list[str]) -> dict[str, Any]:
    """SUMMARY with row locators: counts for all rows, a few offending rows by position."""
    fmt: dict[str, Any] = {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_ROWS}
    if locator:
        fmt["unexpected_index_column_names"] = locator
    return fmt
