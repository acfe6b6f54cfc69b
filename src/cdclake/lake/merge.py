"""Merging a decoded batch into the Iceberg mirrors: the driver every merge engine runs under.

Table by table, in the batch's order: the tables the configuration or the run leaves out are
skipped, a quarantined mirror is left alone, a table that failed on an earlier batch of the
run is held back, and the rest go to the chosen :class:`cdclake.lake.engine.MergeEngine` (its
promises are written down there). One table's failure never stops the others; the stream's
merged end LSN advances only when every table has the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from traceback import format_exc
from typing import Any

from pyiceberg.catalog import Catalog

from cdclake.config import Config
from cdclake.errors import (
    CdclakeError,
    ConcurrentRunError,
    LakeError,
    first_line,
    redact,
    unforeseen,
)
from cdclake.lake import quarantine
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.batch import Batch, TableEntry, selected
from cdclake.lake.changelog import append_changelog
from cdclake.lake.engine import MergeEngine
from cdclake.lake.reports import MergeReport, TableReport
from cdclake.lake.tables import find_mirror, mirror_identifier
from cdclake.lake.watermark import merged_end_lsn, record_merged
from cdclake.lsn import format_lsn

__all__ = ["MergeReport", "TableReport", "merge_batch", "mirror_identifier"]

log = logging.getLogger(__name__)


def merge_batch(catalog: Catalog, config: Config, batch: Batch, *,
                engine: MergeEngine | None = None, only: Sequence[str] = (),
                changelog: bool = False, held_back: Collection[int] = (),
                follows: int | None = None) -> MergeReport:
    """Apply ``batch`` to every mirror (and, with ``changelog``, append it to the changelogs),
    each table through ``engine`` (default: :class:`cdclake.lake.arrowmerge.ArrowMerge`).

    Tables commit one after another, each atomically. One table never stops the others: a
    table whose merge fails — any error but a lost lease — is reported in ``failed`` and keeps
    its commit LSN, and the next table goes on; a quarantined table
    (:mod:`cdclake.lake.quarantine`) is left alone and reported in ``quarantined``. The
    stream's merged end LSN advances only when no table failed or is held back: the batch
    stays pending, and the next run merges it again, each table skipping what it already has.
    ``held_back`` (their oids) names the tables that failed on an earlier batch of this run:
    their changes must go in order, so they are not merged now either; ``follows`` is the end
    LSN of that earlier batch, where this one may start although the merged end LSN stayed
    behind.
    With ``only``, just those tables are merged and the merged end LSN stays where it is.
    Tables excluded by ``config.tables`` or ``config.exclude_tables`` are not merged.
    """
    chosen: MergeEngine = engine if engine is not None else ArrowMerge(catalog, config)
    report = MergeReport(batch.name, config.stream)
    merged = merged_end_lsn(catalog, config.namespace, config.stream)
    report.previous_end_lsn = merged
    if merged is not None and batch.start_lsn > max(merged, follows or 0):
        raise LakeError(
            f"batch {batch.name} starts at LSN {format_lsn(batch.start_lsn)}, but stream "
            f"{config.stream!r} is merged only up to {format_lsn(merged)} in namespace "
            f"{config.namespace}: a batch in between is missing; merge it first (nothing of "
            f"{batch.name} was applied)")
    for entry in batch.entries:
        relations = [v.relation for v in entry.versions]
        if ((config.tables and not selected(config.tables, entry.table, relations))
                or selected(config.exclude_tables, entry.table, relations)
                or (only and not selected(only, entry.table, relations))):
            report.excluded.append(entry.table)
            continue
        if entry.oid in held_back:
            report.held_back.append(entry.table)
            continue
        try:
            _merge_entry(catalog, config, batch, entry, report, chosen, changelog=changelog)
        except ConcurrentRunError:
            raise
        except Exception as exc:  # this table only: the others go on
            failure = {"table": entry.table, "oid": entry.oid, "error": first_line(exc)}
            if not isinstance(exc, CdclakeError):  # a bug: its traceback goes with it
                failure.update(error=unforeseen(exc), traceback=redact(format_exc()))
            report.failed.append(failure)
            log.warning("merge of batch %s: table %s failed, left for the next run: %s",
                        batch.name, entry.table, failure["error"])
    # a table held back has not got this batch even when the batch has no change of it
    report.end_lsn = merged if only or report.failed or held_back else record_merged(
        catalog, config.namespace, config.stream, batch.end_lsn)
    return report


def _merge_entry(catalog: Catalog, config: Config, batch: Batch, entry: TableEntry,
                 report: MergeReport, engine: MergeEngine, *, changelog: bool) -> None:
    """One table of :func:`merge_batch`: its mirror (and changelog), into ``report``."""
    held = _quarantine_of(catalog, config, entry)
    if held is not None:
        report.quarantined.append({"table": entry.table, "reason": held.get("reason", ""),
                                   "since_batch": held.get("batch")})
        return
    changes = batch.load(entry) if changelog else None
    table = engine.merge_table(batch, entry, loaded=changes)
    if table.quarantined:
        report.quarantined.append({"table": entry.table, "reason": table.quarantined,
                                   "since_batch": batch.name})
        return
    report.tables.append(table)
    if changelog:
        assert changes is not None
        report.changelogs.append(append_changelog(catalog, config, batch.name, changes))


def _quarantine_of(catalog: Catalog, config: Config, entry: TableEntry) -> dict[str, Any] | None:
    """The quarantine of ``entry``'s mirror, if it has one that is quarantined."""
    latest = entry.versions[-1].relation
    ident = find_mirror(catalog, config, latest.schema, latest.name, entry.oid)
    return None if ident is None else quarantine.quarantine_of(
        catalog.load_table(ident).properties)
