"""The optional append-only changelog table: every change row of the stream, as history.

It lives next to the mirror as ``<mirror>__changelog`` with the same data columns (evolved the
same way, by attnum) and the stream's system columns as ``_cdc_*``; the old identity is kept as
JSON because its shape changes with the relation version. It has its own summary LSN, so it is
exactly-once on its own: a crash between the mirror's commit and the changelog's is repaired by
the re-run like any other.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.batch import TableChanges
from cdclake.lake.changes import Change, prepare
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
    arrow_type,
    changelog_schema,
    mirror_fields,
    plan_evolution,
)
from cdclake.lake.tables import changelog_identifier, commit_with_retry, ensure_table
from cdclake.lake.watermark import committed_lsn, summary_properties


def append_changelog(catalog: Catalog, config: Config, batch: str, source: TableChanges, *,
                     max_attempts: int = 5) -> dict[str, Any]:
    """Append ``source``'s rows not yet in the changelog; returns a JSON-friendly report."""
    prepared = prepare(source, batch)
    latest = source.latest
    ident = changelog_identifier(config, latest.schema, latest.name)
    report: dict[str, Any] = {"table": source.table, "changelog": ".".join(ident),
                              "appended": 0, "skipped_applied": 0, "commit_lsn": None,
                              "snapshot_id": None}
    if not prepared.changes:
        return report
    last = prepared.versions[-1]
    schema = changelog_schema(last.relation, last.arrow_schema)

    def load() -> Table:
        return ensure_table(catalog, ident, schema, stream=config.stream,
                            source_table=f"{latest.schema}.{latest.name}",
                            source_oid=source.oid, kind="changelog")

    def attempt(table: Table) -> dict[str, Any]:
        stored = committed_lsn(table, config.stream)
        pending = [c for c in prepared.changes if stored is None or c.commit_lsn > stored]
        report["skipped_applied"] = len(prepared.changes) - len(pending)
        report["commit_lsn"] = stored
        if pending:
            tx = table.transaction()
            apply_evolution(tx, plan_evolution(table.schema(),
                                               [v.columns for v in prepared.versions],
                                               source.table))
            data = changelog_rows(pending, tx.table_metadata.schema(), source.table)
            tx.append(data, snapshot_properties=summary_properties(config.stream, batch,
                                                                   prepared.last_lsn))
            table = tx.commit_transaction()
            report["commit_lsn"] = prepared.last_lsn
        report["appended"] = len(pending)
        snap = table.current_snapshot()
        report["snapshot_id"] = snap.snapshot_id if snap else None
        return report

    def landed(table: Table) -> dict[str, Any]:
        report["commit_lsn"] = committed_lsn(table, config.stream)
        snap = table.current_snapshot()
        report["snapshot_id"] = snap.snapshot_id if snap else None
        return report

    what = f"changelog of {source.table}"
    try:
        return commit_with_retry(load, attempt, stream=config.stream,
                                 target_lsn=prepared.last_lsn, done=landed, what=what,
                                 max_attempts=max_attempts)
    except LakeError:
        raise
    except Exception as exc:  # storage or catalog failure: nothing of it committed
        raise LakeError(f"{what} failed ({type(exc).__name__}: {exc}); re-run the merge when "
                        "the cause is fixed") from exc


def changelog_rows(changes: list[Change], schema: Any, table: str) -> pa.Table:
    """The change rows laid out in the changelog's (evolved) schema."""
    by_name = {f.name: a for a, f in mirror_fields(schema, table).items()}
    system = {
        CDC_COMMIT_LSN: lambda c: c.commit_lsn,
        CDC_COMMIT_TS: lambda c: c.commit_ts,
        CDC_XID: lambda c: c.xid,
        CDC_LSN: lambda c: c.lsn,
        CDC_SEQ: lambda c: c.seq,
        CDC_OP: lambda c: c.op,
        CDC_OLD_KEY: lambda c: old_key_json(c),
        CDC_UNCHANGED_TOAST: lambda c: ([_name(c, a) for a in c.unchanged]
                                        if c.unchanged else None),
    }
    arrays = []
    for f in schema.fields:
        if f.name in system:
            values = [system[f.name](c) for c in changes]
        else:
            attnum = by_name[f.name]
            values = [None if c.new is None else c.new.get(attnum) for c in changes]
        try:
            arrays.append(pa.array(values, type=arrow_type(f.field_type)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
            raise LakeError(f"changelog of {table}: column {f.name} ({f.field_type}) cannot "
                            f"hold the stream's values: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=pa.schema(
        [pa.field(f.name, arrow_type(f.field_type)) for f in schema.fields]))


def _name(change: Change, attnum: int) -> str:
    return next(c.name for c in change.version.columns if c.attnum == attnum)


def old_key_json(change: Change) -> str | None:
    if change.old is None:
        return None
    return json.dumps({_name(change, a): _jsonable(v) for a, v in change.old.items()},
                      sort_keys=True)


def _jsonable(value: Any) -> Any:
    """JSON for a column value: exact decimals and times as text, bytes as base64."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (Decimal, dt.date, dt.time, dt.datetime)):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
