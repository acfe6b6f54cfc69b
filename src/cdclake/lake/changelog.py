"""The optional append-only changelog table: every change row of the stream, as history.

It lives next to the mirror as ``<mirror>__changelog`` with the same data columns (evolved the
same way, by attnum; a column replaced for a new type keeps the rows logged before under the
old field, :func:`typed_runs`) and the stream's system columns as ``_cdc_*``; the old identity
is kept as JSON because its shape changes with the relation version. It has its own summary
LSN, so it is exactly-once on its own: a crash between the mirror's commit and the changelog's
is repaired by the re-run like any other. A value without a typed representation is null in
its column and in ``_cdc_pg_text`` as for the mirror; in the old-key JSON it is its text.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from cdclake.config import Config
from cdclake.lake.batch import TableChanges
from cdclake.lake.changes import Change, prepare, versions_of
from cdclake.lake.metrics import guard_metrics
from cdclake.lake.retype import evolved_columns, step
from cdclake.lake.rows import table_of
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_LSN,
    CDC_OLD_KEY,
    CDC_OP,
    CDC_SEQ,
    CDC_UNCHANGED_TOAST,
    CDC_XID,
    apply_evolution,
    changelog_schema,
    changelog_system_fields,
    field_types,
    plan_evolution,
)
from cdclake.lake.tables import (
    CHANGELOG,
    changelog_identifier,
    commit_with_retry,
    snapshot_id,
    table_loader,
)
from cdclake.lake.values import PgText
from cdclake.lake.watermark import committed_lsn, summary_properties
from cdclake.tuples import datetimes


def append_changelog(catalog: Catalog, config: Config, batch: str, source: TableChanges, *,
                     max_attempts: int = 5) -> dict[str, Any]:
    """Append ``source``'s rows not yet in the changelog; returns a JSON-friendly report."""
    prepared = prepare(source, batch, relabel_enums=False)
    latest = source.latest
    ident = changelog_identifier(config, latest.schema, latest.name)
    report: dict[str, Any] = {"table": source.table, "changelog": ".".join(ident),
                              "appended": 0, "skipped_applied": 0, "commit_lsn": None,
                              "snapshot_id": None}
    if not prepared.changes:
        return report
    last = prepared.versions[-1]
    schema = changelog_schema(last.relation, last.arrow_schema)

    def attempt(table: Table) -> dict[str, Any]:
        stored = committed_lsn(table, config.stream)
        pending = [c for c in prepared.changes if stored is None or c.commit_lsn > stored]
        report["skipped_applied"] = len(prepared.changes) - len(pending)
        report["commit_lsn"] = stored
        if pending:
            tx = table.transaction()
            for run in typed_runs(pending, table.schema(), source.table):
                schema = tx.table_metadata.schema()
                columns, _ = evolved_columns(schema, source.table,
                                             [v.columns for v in versions_of(run)])
                apply_evolution(tx, plan_evolution(schema, columns, source.table,
                                                   changelog_system_fields()))
                data = changelog_rows(run, tx.table_metadata.schema(), source.table)
                guard_metrics(tx, data)
                tx.append(data, snapshot_properties=summary_properties(config.stream, batch,
                                                                       run[-1].commit_lsn))
            table = tx.commit_transaction()
            report["commit_lsn"] = prepared.last_lsn
        report["appended"] = len(pending)
        report["snapshot_id"] = snapshot_id(table)
        return report

    def landed(table: Table) -> dict[str, Any]:
        report["commit_lsn"] = committed_lsn(table, config.stream)
        report["snapshot_id"] = snapshot_id(table)
        return report

    return commit_with_retry(table_loader(catalog, config, ident, schema, source.latest, source.oid,
                                          CHANGELOG),
                             attempt, stream=config.stream, target_lsn=prepared.last_lsn,
                             done=landed, what=f"changelog of {source.table}",
                             max_attempts=max_attempts)


def typed_runs(changes: Sequence[Change], current: Schema, table: str) -> list[list[Change]]:
    """``changes`` cut where a column's type changes to one that does not hold the values
    before it: each run is appended under its own types, in the same commit, so every row
    keeps the values it was logged with (those before a column was replaced stay under the
    old field's id, readable in the snapshot their run made, as a dropped column's are)."""
    held = field_types(current, table)
    runs: list[list[Change]] = []
    version = None
    for c in changes:
        if c.version is not version:
            version = c.version
            if step(held, version.columns) and runs:
                runs.append([])
        if not runs:
            runs.append([])
        runs[-1].append(c)
    return runs


def changelog_rows(changes: list[Change], schema: Any, table: str) -> pa.Table:
    """The change rows laid out in the changelog's (evolved) schema; ``_cdc_pg_text`` holds
    the exact text of the new row's untyped values."""
    system: dict[str, list[Any]] = {
        CDC_COMMIT_LSN: [c.commit_lsn for c in changes],
        CDC_COMMIT_TS: [c.commit_ts for c in changes],
        CDC_XID: [c.xid for c in changes],
        CDC_LSN: [c.lsn for c in changes],
        CDC_SEQ: [c.seq for c in changes],
        CDC_OP: [c.op for c in changes],
        CDC_OLD_KEY: [old_key_json(c) for c in changes],
        CDC_UNCHANGED_TOAST: [[_name(c, a) for a in c.unchanged] if c.unchanged else None
                              for c in changes],
    }
    # a row has exactly the columns it was logged with: no ADD COLUMN default is filled in
    rows = [{} if c.new is None else c.new for c in changes]
    return table_of(schema, table, system, rows, {})


def _name(change: Change, attnum: int) -> str:
    return next(c.name for c in change.version.columns if c.attnum == attnum)


def old_key_json(change: Change) -> str | None:
    if change.old is None:
        return None
    schema = change.version.arrow_schema
    out = {}
    for a, v in change.old.items():
        name = _name(change, a)
        idx = schema.get_field_index(name)
        out[name] = _jsonable(v, schema.field(idx).type if idx >= 0 else pa.null())
    return json.dumps(out, sort_keys=True)


_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)


def _jsonable(value: Any, t: pa.DataType) -> Any:
    """JSON for a column value: exact decimals and times as text, bytes as base64; a value
    kept as exact text is that text. Temporal storage integers print as Python would print
    the date/time (as before), PostgreSQL's text where Python has none (BC, infinity, ...)."""
    if value is None:
        return None
    if isinstance(value, PgText):
        return value.text
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        elem = t.value_type if pa.types.is_list(t) else pa.null()
        return [_jsonable(v, elem) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        if pa.types.is_date32(t):
            return _date_json(value)
        if pa.types.is_time64(t):
            return str((_EPOCH + dt.timedelta(microseconds=value)).time())
        if pa.types.is_timestamp(t):
            return _timestamp_json(value, t.tz is not None)
    if isinstance(value, (Decimal, dt.date, dt.time, dt.datetime)):
        return str(value)
    return value


def _date_json(days: int) -> str:
    try:
        return str(_EPOCH_DATE + dt.timedelta(days=days))
    except OverflowError:
        if days in (datetimes.INT32_MAX, -datetimes.INT32_MAX):
            pg = datetimes.INT32_MAX if days > 0 else datetimes.INT32_MIN
        else:
            pg = days - datetimes.EPOCH_SHIFT_DAYS
        return datetimes.date_text(struct.pack("<i", pg))


def _timestamp_json(us: int, tz: bool) -> str:
    try:
        value = _EPOCH + dt.timedelta(microseconds=us)
        return str(value.replace(tzinfo=dt.UTC) if tz else value)
    except OverflowError:
        if us in (datetimes.INT64_MAX, -datetimes.INT64_MAX):
            pg = datetimes.INT64_MAX if us > 0 else datetimes.INT64_MIN
        else:
            pg = us - datetimes.EPOCH_SHIFT_USECS
        fmt = datetimes.timestamptz_text if tz else datetimes.timestamp_text
        return fmt(struct.pack("<q", pg))
