"""The steps of one ingest run: ship → snapshot → decode → validate stream → merge → validate
tables → report.

Each step takes the :class:`~cdclake.config.Config` and the run's
:class:`~cdclake.pipeline.params.RunParams` and returns a JSON-able dict, so the Airflow DAG
runs them as separate tasks (results travel through XCom) and ``cdclake run`` calls them in
sequence (:func:`run_once`). None of them keeps state of its own: what remains to be merged
is recomputed from the store and the lake every time (:mod:`cdclake.lake.pending`), which
is what makes every task safe to retry or to run again alone:

- ship skips what the manifest lists; the initial snapshot copies only tables without a
  mirror (a table whose snapshot never committed has none); decode resumes from the stream's
  progress state;
- validate stream and merge work on *every* decoded batch not yet merged in full — not just
  the one this run decoded — so a batch whose merge failed is merged by the next run even when
  that run decodes nothing new; the merge takes only batches whose validation the store
  records (:mod:`cdclake.lake.validated`), so a batch another run decoded in between waits
  for the next validation;
- the merge is per-table idempotent through each table's snapshot summary (docs/lake.md): a
  run killed between two table commits is finished, not duplicated, by the next one.

Failures raise :class:`~cdclake.errors.CdclakeError` subclasses that say what and where;
nothing is merged past a failed stream check.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.archive import Layout, open_store
from cdclake.archive.lease import DECODE, LAKE, Lease, Unfenced
from cdclake.archive.manifest import Manifest
from cdclake.config import Config
from cdclake.errors import (
    CdclakeError,
    ConcurrentRunError,
    ConfigError,
    LakeError,
    TableMergeBug,
    redact,
)
from cdclake.lake.batch import combined, manifest_rows, selected, unselectable
from cdclake.lake.pending import (
    latest_relations,
    list_batches,
    merge_groups,
    open_batch,
    pending,
    stream_chunks,
)
from cdclake.lsn import format_lsn, format_lsn_or_none, parse_lsn
from cdclake.pipeline.params import RunParams
from cdclake.stream.progress import load_progress

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from cdclake.archive.store import ObjectStore
    from cdclake.catalog.export import FollowedTable
    from cdclake.catalog.model import RelationVersion
    from cdclake.lake.engine import MergeEngine
    from cdclake.lake.merge import MergeReport
    from cdclake.lake.pending import DecodedBatch
    from cdclake.quality import QualityContext

log = logging.getLogger(__name__)

STEPS = ("ship", "snapshot", "decode", "validate_stream", "merge", "validate_tables", "report")


# -- 1. ship ----------------------------------------------------------------------------------


def ship(config: Config, params: RunParams | None = None) -> dict[str, Any]:
    """Upload new segments from ``config.archive_dir`` (an archive directory PostgreSQL
    copies into). Without one, ``archive_command`` runs ``cdclake wal-push`` and segments are
    in the store already: nothing to do. Raises ArchiveGapError (after shipping what precedes
    the gap) rather than let decoding run over a hole."""
    params = params or RunParams()
    if config.archive_dir is None:
        return {"skipped": True, "reason": "no archive directory (CDCLAKE_ARCHIVE_DIR): "
                "segments are pushed to the store by archive_command (cdclake wal-push)",
                "shipped": [], "dry_run": params.dry_run}
    from cdclake.archive.ship import ship as ship_directory

    report = ship_directory(config, config.archive_dir, layout=Layout(),
                            dry_run=params.dry_run)
    planned = [f.name for f in report.plan.to_ship]
    return {"skipped": False, "from": str(config.archive_dir), "store": report.store_url,
            "shipped": planned if params.dry_run else report.shipped,
            "unchanged": report.unchanged, "already": len(report.plan.already),
            "pending": report.plan.pending, "ignored": report.plan.ignored,
            "summary": report.summary(), "dry_run": params.dry_run}


# -- 2. initial snapshot ----------------------------------------------------------------------


def snapshot(config: Config, params: RunParams | None = None, *, spark: Any = None,
             catalog: Catalog | None = None,
             progress: Callable[[str], None] | None = None,
             todo: list[FollowedTable] | None = None) -> dict[str, Any]:
    """Copy the current rows of the tables in scope that have no mirror yet
    (``snapshot_mode=initial``) and replace the mirrors of ``params.snapshot_tables`` by a
    fresh copy, all in one snapshot (:mod:`cdclake.snapshot.driver`); ``todo``: those tables,
    when :func:`tables_to_snapshot` chose them first. The merge then hands over from each
    snapshot to the change stream by transaction visibility."""
    params = params or RunParams()
    if skipped := _snapshot_skipped(config, params):
        return {"skipped": True, "tables": [], **skipped}
    from cdclake.snapshot.driver import snapshot_tables

    with _lease(config, open_store(config), LAKE, "snapshot"):
        return snapshot_tables(config, replace=params.snapshot_tables,
                               missing=config.snapshot_mode == "initial", spark=spark,
                               catalog=catalog or _catalog(config), progress=progress,
                               todo=todo)


def tables_to_snapshot(config: Config, params: RunParams) -> list[FollowedTable]:
    """The tables the snapshot step would copy now (none when it is skipped): the DAG's task
    submits a Spark application only when there is one."""
    if _snapshot_skipped(config, params):
        return []
    from cdclake.snapshot.driver import tables_to_copy

    return tables_to_copy(config, _catalog(config), replace=params.snapshot_tables,
                          missing=config.snapshot_mode == "initial")


def _snapshot_skipped(config: Config, params: RunParams) -> dict[str, Any]:
    """Why the snapshot step copies nothing whatever the tables (``{}``: it may copy)."""
    if not params.snapshot_tables and config.snapshot_mode == "never":
        return {"reason": "snapshot_mode is never"}
    if params.dry_run:
        return {"reason": "dry run: nothing is copied", "dry_run": True}
    return {}


# -- 3. decode --------------------------------------------------------------------------------


def decode(config: Config, params: RunParams | None = None, *,
           spark: Any = None, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Decode what the archive holds on Spark, as one batch or, for a backlog longer than
    ``config.max_batch_segments`` / ``max_batch_bytes``, as several
    (:func:`cdclake.spark.job.decode_batch` until nothing new is left).

    ``end_lsn`` is rounded up to the segment holding it (batches end on segment boundaries).
    ``start_lsn`` shapes only the stream's first batch; afterwards the decoder continues from
    its saved progress, and the result says the LSN was not applied. Without it the stream
    starts at the full dictionary ``cdclake source install`` wrote (changes recorded before it
    are dropped): the first batch skips the archived segments wholly before it, and until the
    install's segment is archived the result says it is ``waiting`` for it; a first batch
    without the message fails, telling the operator to run the install or give a start LSN.
    Returns ``{"batch": None}`` when the archive holds nothing new; batches decoded earlier but
    not merged yet are still picked up by the later steps. A segment missing below archived
    ones stops the step (ArchiveGapError), after the batches before it. A dry run plans the
    next batch only. ``stop`` (follow mode's signal) ends a backlog after the batch being
    decoded: each batch is saved whole, and the next run goes on from it.
    """
    params = params or RunParams()
    from cdclake.spark.job import BatchResult, decode_batch

    store = open_store(config)
    # CDCLAKE_TABLES filters the decode: a typo would drop every table's changes for good
    # (and one in CDCLAKE_EXCLUDE_TABLES would mirror the table meant to be left out)
    _check_tables(config, store, {"CDCLAKE_TABLES": config.tables,
                                  "CDCLAKE_EXCLUDE_TABLES": config.exclude_tables},
                  "nothing was decoded", source=True)
    until = params.until_segment or (None if params.end_lsn is None else Manifest(
        store, Layout()).segment_holding(params.end_lsn))
    first = load_progress(store, Layout()) is None
    results = []
    with _lease(config, store, DECODE, "decode", params.dry_run) as lease:
        while isinstance(result := decode_batch(config, spark=spark, until_segment=until,
                                                dry_run=params.dry_run,
                                                start_lsn=params.start_lsn, fence=lease),
                         BatchResult):
            results.append(result)
            if params.dry_run:
                break
            log.info("decode: batch %s: %d commit(s) %s..%s", result.batch, result.commits,
                     format_lsn(result.start_lsn), format_lsn(result.end_lsn))
            if stop is not None and stop():
                break
    notes = {"until_segment": until, "dry_run": params.dry_run}
    if params.start_lsn is not None:
        notes["start_lsn_applied"] = first
    if result is not None and not isinstance(result, BatchResult):
        notes["waiting"] = result.reason
    if not results:
        return {"batch": None, **notes}
    tables: dict[str, int] = {}
    stats: dict[str, int] = {}
    for r in results:
        for name, n in manifest_rows(r.manifest).items():
            tables[name] = tables.get(name, 0) + n
        for k, v in r.stats.items():
            stats[k] = max(stats.get(k, 0), v) if k.startswith("peak") else stats.get(k, 0) + v
    return {"batch": results[-1].batch, "batches": [r.batch for r in results],
            "start_lsn": format_lsn(results[0].start_lsn),
            "end_lsn": format_lsn(results[-1].end_lsn),
            "commits": sum(r.commits for r in results),
            "segments": [s for r in results for s in r.segments], "tables": tables,
            "stats": stats, **notes}


# -- 4. validate the change stream ------------------------------------------------------------


def validate_stream(config: Config, params: RunParams | None = None, *,
                    catalog: Catalog | None = None,
                    context: QualityContext | None = None) -> dict[str, Any]:
    """Run the change-stream suite on every batch the lake has yet to take, each table's
    changes in chunks of at most ``config.quality_chunk_rows`` rows (the process holds one),
    read with only the columns the suite looks at (system and key columns). Consecutive
    batches are checked together in the groups the merge takes at once
    (:func:`~cdclake.lake.pending.merge_groups`, ``merge_max_rows``): a table's checks cost
    GX a fixed price however few its changes, which a backlog paid once per table and batch
    (pgbench scale 80, 16 batches: the step took 16 s, 9 s in groups).

    Raises QualityError on a critical failure, so the merge never sees a bad stream. Tables
    whose replica identity or key changed inside a batch are validated per relation version
    (``schema.table@v<valid_from>``), each under its own identity. Each batch of a group that
    passed is recorded in the store (``state/validated/<batch>.json``; not by a dry run): the
    merge takes no other.
    """
    params = params or RunParams()
    store, layout = open_store(config), Layout()
    _check_tables(config, store, _selections(config, params), "nothing was merged")
    catalog = catalog or _catalog(config)
    out: list[dict[str, Any]] = []
    with _lease(config, store, LAKE, "validate_stream", params.dry_run):
        todo = pending(list_batches(store, layout), _merged_end(catalog, config))
        if todo and context is None:  # one for all the batches
            from cdclake.quality import QualityContext

            context = QualityContext.for_config(config)
        with context.publishing_once() if context is not None else contextlib.nullcontext():
            for group in merge_groups(todo, config.merge_max_rows):
                _validate_group(config, params, store, layout, group, context, out)
    return {"batches": out, "dry_run": params.dry_run}


def _validate_group(config: Config, params: RunParams, store: ObjectStore, layout: Layout,
                    group: list[DecodedBatch], context: QualityContext,
                    out: list[dict[str, Any]]) -> None:
    """Validate consecutive batches' stream as one (its report into ``out``); each batch
    recorded when it passed."""
    from cdclake.lake.validated import record_validation
    from cdclake.quality import raise_for_failures, validate_stream_chunks
    from cdclake.quality.inputs import stream_columns

    batch = combined([open_batch(config, store, layout, d) for d in group])
    report = validate_stream_chunks(
        config, stream_chunks(batch, params.tables, config.quality_chunk_rows,
                              columns=stream_columns),
        run_name=batch.name, context=context)
    tables = {r.table.partition("#")[0] for r in report.tables}
    out.append({"batch": batch.name, "decoded_batches": [d.name for d in group],
                "tables": len(tables), "success": report.success,
                "warnings": [n.table for n in report.identity_nothing],
                "data_docs_index": report.data_docs_index, "summary": report.summary()})
    raise_for_failures(report)
    if not params.dry_run:
        for decoded in group:
            record_validation(store, layout, decoded, params.tables, report.summary())
    release_arrow_memory()


# -- 5. merge ----------------------------------------------------------------------------------


def merge(config: Config, params: RunParams | None = None, *,
          catalog: Catalog | None = None) -> dict[str, Any]:
    """Merge the pending batches, oldest first, into the Iceberg mirrors: those whose stream
    validation the store records (:mod:`cdclake.lake.validated`), up to the first that has
    none — a later batch cannot go before it. The result names the pending batches it left
    (``not_validated``); the next validation and merge take them.

    With ``params.tables`` only those tables are merged and the stream's merged end LSN is not
    advanced, so the other tables take the same batches on the next run (each table skips
    what it already has). A dry run reports what would be merged and commits nothing.
    """
    from cdclake.lake.merge import merge_batch
    from cdclake.lake.validated import is_validated

    params = params or RunParams()
    store, layout = open_store(config), Layout()
    _check_tables(config, store, _selections(config, params), "nothing was merged")
    catalog = catalog or _catalog(config)
    with _lease(config, store, LAKE, "merge", params.dry_run) as lease:
        before = _merged_end(catalog, config)
        todo = pending(list_batches(store, layout), before)
        validated = [is_validated(store, layout, b, params.tables) for b in todo]
        # a dry run validated the stream without recording it: it shows every batch
        ready = len(todo) if params.dry_run or all(validated) else validated.index(False)
        todo, waiting = todo[:ready], [b.name for b in todo[ready:]]
        if waiting:
            log.warning("merge: %d pending batch(es) from %s on have no stream validation "
                        "for this merge: left for the next run", len(waiting), waiting[0])
        reports: list[dict[str, Any]] = []
        engine = _merge_engine(config, catalog) if todo and not params.dry_run else None
        held: set[int] = set()  # the oids of tables that failed on a batch: not merged past it
        follows: int | None = None
        if params.dry_run:
            reports = [{"batch": decoded.name, "start_lsn": format_lsn(decoded.start_lsn),
                        "end_lsn": format_lsn(decoded.end_lsn), "would_merge": decoded.rows(),
                        "validated": recorded}
                       for decoded, recorded in zip(todo, validated, strict=False)]
            todo = []
        for group in merge_groups(todo, config.merge_max_rows):
            batch = combined([open_batch(config, store, layout, d) for d in group])
            log.info("merging batch %s (%s..%s)", batch.name, format_lsn(batch.start_lsn),
                     format_lsn(batch.end_lsn))
            lease.check()
            report = merge_batch(catalog, config, batch, engine=engine, only=params.tables,
                                 held_back=held, follows=follows)
            held.update(f["oid"] for f in report.failed)
            follows = batch.end_lsn
            reports.append({**_merge_json(report), "decoded_batches": [d.name for d in group]})
            release_arrow_memory()
    touched = sorted({t["table"] for r in reports for t in r.get("tables", ())})
    return {"previous_end_lsn": format_lsn_or_none(before),
            "end_lsn": format_lsn_or_none(_merged_end(catalog, config)),
            "batches": reports, "not_validated": waiting, "tables": touched,
            "failed": [{"batch": r["batch"], "table": f["table"], "error": f["error"],
                        **({"traceback": f["traceback"]} if "traceback" in f else {})}
                       for r in reports for f in r.get("failed", ())],
            "quarantined": _quarantined(reports), "dry_run": params.dry_run}


def _quarantined(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each quarantined table once (the first batch that names it): its reason."""
    found: dict[str, dict[str, Any]] = {}
    for r in reports:
        for q in r.get("quarantined", ()):
            found.setdefault(q["table"], q)
    return [found[t] for t in sorted(found)]


def raise_for_failed_tables(results: Mapping[str, Any]) -> None:
    """After the report: a run in which a table's merge failed fails too (one line naming
    the tables), although the other tables committed and the report has everything. A
    failure nobody foresaw (a bug) is a :class:`TableMergeBug` carrying its traceback, which
    the CLI keeps in the home's log (exit 1), not a LakeError."""
    failed = (results.get("merge") or {}).get("failed") or []
    if not failed:
        return
    first: dict[str, str] = {}
    for f in failed:
        first.setdefault(f["table"], f"{f['table']} (batch {f['batch']}: {f['error']})")
    names = list(first)
    line = (f"the merge of {len(names)} table(s) failed: {'; '.join(first.values())}; the "
            f"other tables committed, and the next run retries "
            f"{'it' if len(names) == 1 else 'them'}")
    bug = next((f["traceback"] for f in failed if f.get("traceback")), None)
    if bug is not None:
        raise TableMergeBug(f"{line}\n{bug}")
    raise LakeError(line)


#: the modules of the Spark merge's task bodies (its read of a batch's parts)
MERGE_TASKS = ("cdclake.lake.sparkparts",)


def lake_session(config: Config, refusal: Callable[[str], CdclakeError],
                 tasks: tuple[str, ...] = MERGE_TASKS) -> Any:
    """The process's Spark session for steps that read or write the mirrors on Spark (the
    Spark merge, the mirror check on Spark, a follower's every step), the catalog opened
    first; when the JVM does not start (no Java, a bad spark_conf), ``refusal`` of Spark's
    one line is raised. ``tasks``: the modules of the task bodies it will run."""
    from cdclake.lake.catalog import open_catalog
    from cdclake.sparkenv.session import session
    from cdclake.sparkenv.tasks import error_line

    try:
        open_catalog(config)  # Spark reads the catalog's tables, pyiceberg creates them
        return session(config, "merge", tasks=tasks)
    except CdclakeError:
        raise
    except Exception as exc:
        raise refusal(error_line(exc)) from exc


def _merge_engine(config: Config, catalog: Catalog) -> MergeEngine:
    """The merge engine ``config.merge_engine`` names: pyiceberg, or Spark with the pyiceberg
    engine for the tables Spark declines."""
    from cdclake.lake.arrowmerge import ArrowMerge
    from cdclake.lake.sparkmerge import SparkMerge

    arrow = ArrowMerge(catalog, config)
    if config.merge_engine != "spark":
        return arrow
    return SparkMerge(_merge_session(config), catalog, config, fallback=arrow)


def _merge_session(config: Config) -> Any:
    """The Spark session of ``merge_engine = "spark"``."""
    return lake_session(config, lambda line: LakeError(
        f"merge_engine is spark, but Spark does not start ({line}); nothing was merged"))


def merged_batches(merged: Mapping[str, Any]) -> list[str]:
    """The decoded batches the merge step's result took (or, a dry run, would take): a
    merge of several at once names them all."""
    return [name for b in merged.get("batches", ())
            for name in b.get("decoded_batches", [b["batch"]])]


def _merge_json(report: MergeReport) -> dict[str, Any]:
    out = report.to_json()
    for key in ("previous_end_lsn", "end_lsn"):
        out[key] = format_lsn_or_none(out[key])
    for t in out["tables"]:
        for key in ("previous_lsn", "commit_lsn"):
            t[key] = format_lsn_or_none(t[key])
    return out


# -- 6. validate the mirror tables -----------------------------------------------------------


def validate_tables(config: Config, params: RunParams | None = None,
                    merged: Mapping[str, Any] | None = None, *,
                    catalog: Catalog | None = None,
                    context: QualityContext | None = None) -> dict[str, Any]:
    """Run the mirror suite on the mirrors the merge touched (``merged``: the merge step's
    result), or, without it, on every mirror the decoded batches name.

    The suite needs each table's replica identity and key, which only the decoder's relation
    versions give: they come from the batches' manifests (the newest version wins).
    """
    from cdclake.lake.tables import inexact_marks
    from cdclake.quality import raise_for_failures, validate_mirror_chunks

    params = params or RunParams()
    if params.dry_run:
        return {"skipped": True, "reason": "dry run: nothing was merged", "tables": []}
    store, layout = open_store(config), Layout()
    batches = list_batches(store, layout)
    if merged is not None:
        names = set(merged_batches(merged))
        batches = [b for b in batches if b.name in names]
        wanted = set(merged.get("tables", ()))
    else:
        wanted = None
    relations = latest_relations(config, store, layout, batches)
    if wanted is not None:
        relations = {k: v for k, v in relations.items() if k in wanted}
    if params.tables:
        relations = {k: v for k, v in relations.items() if selected(params.tables, k, [v])}
    since = None if merged is None else _merged_since(merged)
    with _lease(config, store, LAKE, "validate_tables"):
        catalog = catalog or _catalog(config)
        if config.merge_engine == "spark":
            chunks, missing = _spark_mirrors(config, catalog, relations, since)
        else:
            chunks, missing = _arrow_mirrors(config, catalog, relations, since)
        chunks = _nonempty(chunks)
        if chunks is None:
            return {"tables": [], "missing": missing, "success": True}
        run_name = f"{max(b.name for b in batches)}-mirrors" if batches else None
        report = validate_mirror_chunks(config, chunks, run_name=run_name, context=context,
                                        inexact=inexact_marks(config, catalog, relations))
    rows: dict[str, int] = {}
    for t in report.tables:  # a table's chunks (table#2, ...) add up
        name = t.table.split("#", 1)[0]
        rows[name] = rows.get(name, 0) + t.rows
    result = {"tables": sorted(rows), "rows": rows,
              "scope": "full" if since is None else "written by this run",
              "checked_on": "spark" if config.merge_engine == "spark" else "pandas",
              "missing": missing, "success": report.success,
              "data_docs_index": report.data_docs_index, "summary": report.summary()}
    raise_for_failures(report)
    return result


def _nonempty(items: Iterator[Any]) -> Iterator[Any] | None:
    """``items``, or None when there are none. The first, taken to know, is handed on and
    not held: a chunk of a mirror is freed once checked, the first too."""
    try:
        head = [next(items)]
    except StopIteration:
        return None

    def again() -> Iterator[Any]:
        while head:
            yield head.pop()
        yield from items
    return again()


def _arrow_mirrors(config: Config, catalog: Catalog, relations: Mapping[str, RelationVersion],
                   since: Mapping[str, int | None] | None
                   ) -> tuple[Iterator[tuple[str, RelationVersion, Any]], list[str]]:
    """The mirrors as chunks of the columns the mirror suite reads, one in memory at a
    time (``quality_chunk_rows`` rows)."""
    from cdclake.lake.tables import mirror_chunks
    from cdclake.quality.inputs import identity_of, mirror_columns, mirror_parameters

    def columns(rel: RelationVersion, schema: Any) -> list[str]:
        return mirror_columns(mirror_parameters(rel.name, identity_of(rel), schema))

    return mirror_chunks(config, catalog, relations, since=since, columns=columns,
                         max_rows=config.quality_chunk_rows)


def _spark_mirrors(config: Config, catalog: Catalog, relations: Mapping[str, RelationVersion],
                   since: Mapping[str, int | None] | None
                   ) -> tuple[Iterator[tuple[str, RelationVersion, Any]], list[str]]:
    """With ``merge_engine = "spark"`` the mirror suite runs on Spark DataFrames (GX's Spark
    engine): the rows stay on the executors, whatever the run wrote. Mirrors Spark cannot read
    (``time`` columns) are read with pyiceberg, in chunks."""
    from cdclake.lake.sparkmerge import spark_mirrors
    from cdclake.sparkenv.tasks import error_line

    try:
        frames, missing, unreadable = spark_mirrors(_merge_session(config), config, catalog,
                                                    relations, since)
    except CdclakeError:
        raise
    except Exception as exc:  # Py4J and pyspark errors: one line
        raise LakeError(f"mirror check on Spark: cannot read the mirrors ({error_line(exc)})"
                        ) from exc
    arrow, _ = _arrow_mirrors(config, catalog, {k: relations[k] for k in unreadable}, since)
    return itertools.chain(((k, relations[k], frames[k]) for k in sorted(frames)), arrow), missing


def _merged_since(merged: Mapping[str, Any]) -> dict[str, int | None]:
    """Per table, the commit LSN its mirror had before the run's first batch (None: it had
    none, so everything in it is the run's). Batches are in the order they merged."""
    since: dict[str, int | None] = {}
    for batch in merged.get("batches", ()):
        for t in batch.get("tables", ()):
            lsn = t.get("previous_lsn")
            since.setdefault(t["table"], None if lsn is None else parse_lsn(lsn))
    return since


# -- 7. report --------------------------------------------------------------------------------


def report(config: Config, params: RunParams | None = None,
           results: Mapping[str, Any] | None = None, *, run_id: str | None = None,
           catalog: Catalog | None = None) -> dict[str, Any]:
    """Put the run's results together with where each mirror stands, and write them to
    ``<reports>/runs/<run id>.json`` and ``<store>/reports/runs/<run id>.json`` (a dry run
    writes nothing). The Data Docs index is named so an operator can open it."""
    params = params or RunParams()
    results = dict(results or {})
    run_id = safe_run_id(run_id)
    catalog = catalog or _catalog(config)
    from cdclake.lake.tables import mirror_status

    merged = results.get("merge") or {}
    named = {*(merged.get("tables") or ()), *(q["table"] for q in merged.get("quarantined", ()))}
    try:
        with _lease(config, open_store(config), LAKE, "report", params.dry_run):
            mirrors = mirror_status(config, catalog, sorted(named) or None)
            merged_end = _merged_end(catalog, config)
    except ConcurrentRunError as exc:  # the report of a run that failed still gets written
        mirrors, merged_end = {}, None
        results["mirrors_not_read"] = str(exc)
    index = config.reports_path() / "data_docs" / "index.html"
    out = {"run_id": run_id, "stream": config.stream, "store": config.effective_store_url(),
           "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
           "params": params.to_json(), "steps": results, "mirrors": mirrors,
           # mirrors the merge knows to differ from their source (cdclake.lake.inexact)
           "inexact": {t: m["inexact"] for t, m in sorted(mirrors.items()) if m.get("inexact")},
           "merged_end_lsn": format_lsn_or_none(merged_end),
           "data_docs_index": str(index) if index.exists() else None}
    if not params.dry_run:
        text = json.dumps(out, indent=2, sort_keys=True, default=str)
        local = config.reports_path() / "runs" / f"{run_id}.json"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        key = Layout().report_key(f"runs/{run_id}.json")
        open_store(config).put(key, text.encode())
        out["report_file"] = str(local)
        out["report_url"] = open_store(config).url(key)
    return out


def safe_run_id(run_id: str | None) -> str:
    """A run id usable as a file name and object key (Airflow's contain ``:`` and ``+``)."""
    if not run_id:
        run_id = f"run-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
    return re.sub(r"[^A-Za-z0-9._=-]", "_", run_id)


# -- all of it ---------------------------------------------------------------------------------


def run_once(config: Config, params: RunParams | None = None, *, run_id: str | None = None,
             spark: Any = None,
             on_step: Callable[[str, dict[str, Any]], None] | None = None,
             on_progress: Callable[[str], None] | None = None,
             on_report: Callable[[dict[str, Any]], None] | None = None,
             stop: Callable[[], bool] | None = None,
             quality: QualityContext | None = None) -> dict[str, Any]:
    """``cdclake run``: the steps in order, in this process, as the DAG runs them
    (``on_progress`` gets the snapshot's progress lines, ``on_report`` the report).

    ``stop`` is asked before each step and between the batches of a backlog (follow mode's
    SIGTERM): once it says so, the step under way finishes and the others are left to the
    next run — every step is safe to stop between — and the report names the first step
    left (``stopped_before``). ``quality`` is the GX context both checks use (a follower
    keeps one for all its runs); by default the run opens one.

    A failing step stops the run; the report is still written, with the error — any error,
    cdclake's own or one it did not foresee — so the operator finds what happened where the
    successful runs are, and the error is raised again. A table whose merge failed stops no
    step (the others committed), but once the report is written the run fails naming it
    (:func:`raise_for_failed_tables`). Returns the report.
    """
    params = params or RunParams()
    catalog = _catalog(config)
    results: dict[str, Any] = {}

    seconds: dict[str, float] = {}
    results["seconds"] = seconds  # per step, for people and benchmarks

    def step(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if stop is not None and stop():
            results["stopped_before"] = name
            raise _Stopped
        started = time.monotonic()
        try:
            results[name] = fn()
        finally:
            seconds[name] = round(time.monotonic() - started, 3)
            release_arrow_memory()
        if on_step is not None:
            on_step(name, results[name])
        return results[name]

    try:
        step("ship", lambda: ship(config, params))
        step("snapshot", lambda: snapshot(config, params, spark=spark, catalog=catalog,
                                          progress=on_progress))
        step("decode", lambda: decode(config, params, spark=spark, stop=stop))
        step("validate_stream", lambda: validate_stream(config, params, catalog=catalog,
                                                        context=quality))
        merged = step("merge", lambda: merge(config, params, catalog=catalog))
        step("validate_tables", lambda: validate_tables(config, params, merged,
                                                        catalog=catalog, context=quality))
    except _Stopped:
        pass
    except Exception as exc:
        results["error"] = redact(f"{type(exc).__name__}: {exc}")
        try:
            report(config, params, results, run_id=run_id, catalog=catalog)
        except Exception as failed:  # the run's own error is the one to tell
            log.warning("the report of the failed run was not written: %s",
                        redact(str(failed)))
        raise
    out = report(config, params, results, run_id=run_id, catalog=catalog)
    if on_report is not None:
        on_report(out)
    raise_for_failed_tables(results)
    return out


# -- helpers -----------------------------------------------------------------------------------


def release_arrow_memory() -> None:
    """Give the OS back what Arrow's allocator keeps of freed buffers. mimalloc holds them for
    reuse, so one batch's or step's Arrow peak stayed the driver's RSS through what came
    after, where pandas and GX allocate with malloc beside it (8 × 10M doubles sorted and
    freed: RSS 1,951 MiB kept, 115 MiB once released). Called after each batch a step
    validates or merges, and after each step of a run."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


class _Stopped(Exception):
    """``run_once``'s ``stop`` said so before a step: the run ends there, reported."""


#: the leases this process holds across runs, by name (:func:`holding`)
_held: dict[str, Lease] = {}


@contextlib.contextmanager
def holding(config: Config, name: str, purpose: str) -> Iterator[Lease]:
    """Hold the stream's lease ``name`` across every step run inside (``cdclake run
    --follow`` holds the decode lease for its whole life): the steps use it instead of taking
    it each time, so a scheduled run waits for it, then refuses naming ``purpose``."""
    with Lease(open_store(config), name, purpose=f"{purpose} of stream {config.stream}",
               ttl=config.lease_ttl, wait=config.lease_wait) as lease:
        _held[name] = lease
        try:
            yield lease
        finally:
            del _held[name]


@contextlib.contextmanager
def _borrowed(lease: Lease) -> Iterator[Lease]:
    lease.check()
    yield lease


def _lease(config: Config, store: ObjectStore, name: str, step: str,
           dry_run: bool = False) -> contextlib.AbstractContextManager[Lease | Unfenced]:
    """The stream's lease ``name`` for ``step`` of this run (:mod:`cdclake.archive.lease`),
    or the one this process holds already (:func:`holding`); a dry run writes nothing, not
    even a lease."""
    if dry_run:
        return Unfenced()
    if name in _held:
        return _borrowed(_held[name])
    return Lease(store, name, purpose=f"the {step} step of stream {config.stream}",
                 ttl=config.lease_ttl, wait=config.lease_wait)


def _selections(config: Config, params: RunParams) -> dict[str, Sequence[str]]:
    return {"the run's tables": params.tables, "CDCLAKE_TABLES": config.tables,
            "CDCLAKE_EXCLUDE_TABLES": config.exclude_tables}


def _check_tables(config: Config, store: ObjectStore, named: Mapping[str, Sequence[str]],
                  done: str, *, source: bool = False) -> None:
    """Refuse, in one line ending with ``done``, the names of table selections (what names
    them -> the names) that would select nothing (:func:`cdclake.lake.batch.unselectable`):
    a typo, a partitioned table. They are checked against the stream's newest dictionary;
    with ``source``, a name it does not know also against the source's catalog (a table
    created since the last batch). Before a first batch there is nothing to check against
    — and nothing to merge, nor any mirror to lose changes of."""
    if not any(named.values()):
        return
    progress = load_progress(store, Layout())
    if progress is None:
        return
    from cdclake.catalog.dictionary import Dictionary

    relations = Dictionary.from_json(json.loads(store.get(progress.dictionary_key))).versions()
    problems = {what: unselectable(names, relations) for what, names in named.items()}
    if source and config.source_dsn and any(problems.values()):
        from cdclake.catalog.export import followed_tables

        now = [t.name for t in followed_tables(config.source_dsn)]
        problems = {what: unselectable(names, relations, now) for what, names in named.items()}
    said = [f"{what}: {'; '.join(found)}" for what, found in problems.items() if found]
    if said:
        raise ConfigError(f"{'; '.join(said)}; {done}")


def _catalog(config: Config) -> Catalog:
    from cdclake.lake.catalog import open_catalog

    return open_catalog(config)


def _merged_end(catalog: Catalog, config: Config) -> int | None:
    from cdclake.lake.watermark import merged_end_lsn

    return merged_end_lsn(catalog, config.namespace, config.stream)
