"""The steps of one ingest run: ship → snapshot → decode → validate stream → merge → validate
tables → report.

Each step takes the :class:`~cdclake.config.Config` and the run's
:class:`~cdclake.pipeline.params.RunParams` and returns a JSON-able dict, so the Airflow DAG
runs them as separate tasks (results travel through XCom) and ``cdclake run`` calls them in
sequence (:func:`run_once`). None of them keeps state of its own: what remains to be merged
is recomputed from the store and the lake every time (:mod:`cdclake.pipeline.batches`), which
is what makes every task safe to retry or to run again alone:

- ship skips what the manifest lists; the initial snapshot copies only tables without a
  mirror (a table whose snapshot never committed has none); decode resumes from the stream's
  progress state;
- validate stream and merge work on *every* decoded batch not yet merged in full — not just
  the one this run decoded — so a batch whose merge failed is merged by the next run even when
  that run decodes nothing new;
- the merge is per-table idempotent through each table's snapshot summary (docs/lake.md): a
  run killed between two table commits is finished, not duplicated, by the next one.

Failures raise :class:`~cdclake.errors.CdclakeError` subclasses that say what and where;
nothing is merged past a failed stream check.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cdclake.archive import Layout, ObjectStore, open_store
from cdclake.archive.manifest import Manifest
from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import CdclakeError, LakeError
from cdclake.pipeline.batches import DecodedBatch, list_batches, open_batch, pending
from cdclake.pipeline.params import RunParams
from cdclake.wal.lsn import format_lsn, parse_segment_name, segno_of

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from cdclake.lake.batch import Batch, TableChanges
    from cdclake.lake.merge import MergeReport
    from cdclake.quality import QualityContext

log = logging.getLogger(__name__)

STEPS = ("ship", "snapshot", "decode", "validate_stream", "merge", "validate_tables", "report")


def _layout(config: Config) -> Layout:
    """The stream's key layout: the store URL already names the stream's prefix (as for
    wal-push and ship), so keys start at the store root."""
    return Layout()


def _lsn(value: int | None) -> str | None:
    return None if value is None else format_lsn(value)


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

    report = ship_directory(config, config.archive_dir, layout=_layout(config),
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
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Copy the current rows of the tables in scope that have no mirror yet
    (``snapshot_mode=initial``) and replace the mirrors of ``params.snapshot_tables`` by a
    fresh copy, all in one snapshot (:mod:`cdclake.snapshot.driver`). The merge then hands over
    from each snapshot to the change stream by transaction visibility."""
    params = params or RunParams()
    forced = params.snapshot_tables
    if not forced and config.snapshot_mode == "never":
        return {"skipped": True, "reason": "snapshot_mode is never", "tables": []}
    if params.dry_run:
        return {"skipped": True, "reason": "dry run: nothing is copied", "tables": [],
                "dry_run": True}
    from cdclake.snapshot.driver import snapshot_tables

    return snapshot_tables(config, replace=forced, missing=config.snapshot_mode == "initial",
                           spark=spark, catalog=catalog or _catalog(config), progress=progress)


# -- 3. decode --------------------------------------------------------------------------------


def decode(config: Config, params: RunParams | None = None, *,
           spark: Any = None) -> dict[str, Any]:
    """Decode the next batch on Spark (:func:`cdclake.spark.job.decode_batch`).

    ``end_lsn`` is rounded up to the segment holding it (batches end on segment boundaries).
    ``start_lsn`` shapes only the stream's first batch; afterwards the decoder continues from
    its saved progress, and the result says the LSN was not applied. Without it the stream
    starts at the first full dictionary ``cdclake source install`` wrote into the first batch's
    WAL (changes recorded before it are dropped); a first batch without one fails, telling
    the operator to run the install or give a start LSN. Returns
    ``{"batch": None}`` when the archive holds nothing new; batches decoded earlier but not
    merged yet are still picked up by the later steps.
    """
    params = params or RunParams()
    from cdclake.spark.job import decode_batch

    store = open_store(config)
    until = params.until_segment or until_segment_for(config, params.end_lsn, store)
    first = not store.exists(_layout(config).progress_key())
    result = decode_batch(config, spark=spark, until_segment=until, dry_run=params.dry_run,
                          start_lsn=params.start_lsn)
    notes = {"until_segment": until, "dry_run": params.dry_run}
    if params.start_lsn is not None:
        notes["start_lsn_applied"] = first
    if result is None:
        return {"batch": None, **notes}
    tables = {str(t["table"]): sum(int(v["rows"]) for v in t.get("versions", ()))
              for t in result.manifest.get("tables", ())}
    return {"batch": result.batch, "start_lsn": format_lsn(result.start_lsn),
            "end_lsn": format_lsn(result.end_lsn), "commits": result.commits,
            "segments": list(result.segments), "tables": tables, "stats": dict(result.stats),
            **notes}


def until_segment_for(config: Config, end_lsn: int | None,
                      store: ObjectStore | None = None) -> str | None:
    """The shipped segment holding ``end_lsn`` (newest timeline that has it), or None when
    no such segment is shipped yet (decode what there is) or no LSN was asked for."""
    if end_lsn is None:
        return None
    store = store or open_store(config)
    manifest = Manifest(store, _layout(config))
    system = manifest.system()
    if system is None:
        return None
    wanted = segno_of(end_lsn, system.segment_size)
    names = [n for n in manifest.names()
             if parse_segment_name(n, system.segment_size).segno == wanted]
    return max(names, key=lambda n: parse_segment_name(n, system.segment_size).timeline,
               default=None)


# -- 4. validate the change stream ------------------------------------------------------------


def validate_stream(config: Config, params: RunParams | None = None, *,
                    catalog: Catalog | None = None,
                    context: QualityContext | None = None) -> dict[str, Any]:
    """Run the change-stream suite on every batch the lake has yet to take.

    Raises QualityError on a critical failure, so the merge never sees a bad stream. Tables
    whose replica identity or key changed inside a batch are validated per relation version
    (``schema.table@v<valid_from>``), each under its own identity.
    """
    from cdclake.quality import raise_for_failures
    from cdclake.quality import validate_stream as gx_validate_stream

    params = params or RunParams()
    store, layout = open_store(config), _layout(config)
    catalog = catalog or _catalog(config)
    todo = pending(list_batches(store, layout), _merged_end(catalog, config))
    out: list[dict[str, Any]] = []
    for decoded in todo:
        batch = open_batch(config, store, layout, decoded)
        tables, relations = stream_tables(batch, params.tables)
        if not tables:
            out.append({"batch": decoded.name, "tables": 0, "success": True})
            continue
        report = gx_validate_stream(config, tables, relations, run_name=decoded.name,
                                    context=context)
        out.append({"batch": decoded.name, "tables": len(tables), "success": report.success,
                    "warnings": [n.table for n in report.identity_nothing],
                    "data_docs_index": report.data_docs_index, "summary": report.summary()})
        raise_for_failures(report)
    return {"batches": out, "dry_run": params.dry_run}


def stream_tables(batch: Batch, only: tuple[str, ...] = ()) -> tuple[
        dict[str, pa.Table], dict[str, RelationVersion]]:
    """Each table's changes in the decoder's order (never sorted: the suite checks order),
    keyed for the suite; one key per identity when the identity changed in the batch."""
    tables: dict[str, pa.Table] = {}
    relations: dict[str, RelationVersion] = {}
    for entry in batch.entries:
        if only and not _matches(only, entry.table,
                                 [v.relation for v in entry.versions]):
            continue
        source = batch.load(entry)
        identities = {(v.relation.replident, v.relation.key_attnums) for v in source.versions}
        if len(identities) == 1:
            tables[source.table] = _concat([v.changes for v in source.versions])
            relations[source.table] = source.latest
        else:
            for v in source.versions:
                name = f"{source.table}@v{v.relation.valid_from:016X}"
                tables[name] = v.changes
                relations[name] = v.relation
    return tables, relations


def _concat(parts: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]


def _matches(selected: tuple[str, ...] | list[str], name: str,
             relations: list[RelationVersion]) -> bool:
    names = {name} | {f"{r.schema}.{r.name}" for r in relations}
    return bool(names & set(selected))


# -- 5. merge ----------------------------------------------------------------------------------


def merge(config: Config, params: RunParams | None = None, *,
          catalog: Catalog | None = None) -> dict[str, Any]:
    """Merge every pending batch, oldest first, into the Iceberg mirrors.

    With ``params.tables`` only those tables are merged and the stream's merged end LSN is not
    advanced, so the other tables take the same batches on the next run (each table skips
    what it already has). A dry run reports what would be merged and commits nothing.
    """
    params = params or RunParams()
    store, layout = open_store(config), _layout(config)
    catalog = catalog or _catalog(config)
    before = _merged_end(catalog, config)
    todo = pending(list_batches(store, layout), before)
    reports: list[dict[str, Any]] = []
    for decoded in todo:
        if params.dry_run:
            reports.append({"batch": decoded.name, "start_lsn": format_lsn(decoded.start_lsn),
                            "end_lsn": format_lsn(decoded.end_lsn), "would_merge":
                            decoded.rows()})
            continue
        batch = open_batch(config, store, layout, decoded)
        log.info("merging batch %s (%s..%s)", decoded.name, format_lsn(decoded.start_lsn),
                 format_lsn(decoded.end_lsn))
        if params.tables:
            report = merge_tables(catalog, config, batch, params.tables)
        else:
            from cdclake.lake.merge import merge_batch

            report = merge_batch(catalog, config, batch)
        reports.append(_merge_json(report))
    touched = sorted({t["table"] for r in reports for t in r.get("tables", ())})
    return {"previous_end_lsn": _lsn(before), "end_lsn": _lsn(_merged_end(catalog, config)),
            "batches": reports, "tables": touched, "dry_run": params.dry_run}


def merge_tables(catalog: Catalog, config: Config, batch: Batch,
                 tables: tuple[str, ...]) -> MergeReport:
    """Merge ``batch`` into the mirrors of ``tables`` only, leaving the stream's merged end
    LSN where it is (the batch stays pending for the other tables)."""
    from cdclake.lake.merge import MergeReport, merge_table
    from cdclake.lake.watermark import merged_end_lsn

    report = MergeReport(batch.name, config.stream)
    merged = merged_end_lsn(catalog, config.namespace, config.stream)
    report.previous_end_lsn = report.end_lsn = merged
    if merged is not None and batch.start_lsn > merged:
        raise LakeError(f"batch {batch.name} starts at LSN {format_lsn(batch.start_lsn)}, past "
                        f"the stream's merged end {format_lsn(merged)}: a batch in between is "
                        "missing; nothing of this batch was applied")
    for entry in batch.entries:
        relations = [v.relation for v in entry.versions]
        wanted = _matches(tables, entry.table, relations) and (
            not config.tables or _matches(config.tables, entry.table, relations))
        if not wanted:
            report.excluded.append(entry.table)
            continue
        source: TableChanges = batch.load(entry)
        report.tables.append(merge_table(catalog, config, batch.name, source))
    return report


def _merge_json(report: MergeReport) -> dict[str, Any]:
    out = report.to_json()
    for key in ("previous_end_lsn", "end_lsn"):
        out[key] = _lsn(out[key])
    for t in out["tables"]:
        for key in ("previous_lsn", "commit_lsn"):
            t[key] = _lsn(t[key])
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
    from cdclake.lake.tables import mirror_identifier
    from cdclake.quality import raise_for_failures, validate_mirrors

    params = params or RunParams()
    if params.dry_run:
        return {"skipped": True, "reason": "dry run: nothing was merged", "tables": []}
    store, layout = open_store(config), _layout(config)
    batches = list_batches(store, layout)
    if merged is not None:
        names = {b["batch"] for b in merged.get("batches", ())}
        batches = [b for b in batches if b.name in names]
        wanted = set(merged.get("tables", ()))
    else:
        wanted = None
    relations = latest_relations(config, store, layout, batches)
    if wanted is not None:
        relations = {k: v for k, v in relations.items() if k in wanted}
    if params.tables:
        relations = {k: v for k, v in relations.items() if _matches(params.tables, k, [v])}
    catalog = catalog or _catalog(config)
    data: dict[str, pa.Table] = {}
    missing = []
    for name, rel in sorted(relations.items()):
        ident = mirror_identifier(config, rel.schema, rel.name)
        if not catalog.table_exists(ident):
            missing.append(name)  # excluded by config.tables, or no change merged yet
            continue
        data[name] = catalog.load_table(ident).scan().to_arrow()
    if not data:
        return {"tables": [], "missing": missing, "success": True}
    run_name = f"{max(b.name for b in batches)}-mirrors" if batches else None
    report = validate_mirrors(config, data, {k: relations[k] for k in data}, run_name=run_name,
                              context=context)
    result = {"tables": sorted(data), "rows": {k: v.num_rows for k, v in data.items()},
              "missing": missing, "success": report.success,
              "data_docs_index": report.data_docs_index, "summary": report.summary()}
    raise_for_failures(report)
    return result


def latest_relations(config: Config, store: ObjectStore, layout: Layout,
                     batches: list[DecodedBatch]) -> dict[str, RelationVersion]:
    """Each table's newest relation version across ``batches``, keyed as the manifests name
    the table (``schema.table``)."""
    out: dict[str, RelationVersion] = {}
    for decoded in batches:
        batch = open_batch(config, store, layout, decoded)
        for entry in batch.entries:
            rel = entry.versions[-1].relation
            if entry.table not in out or out[entry.table].valid_from <= rel.valid_from:
                out[entry.table] = rel
    return out


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
    merged = results.get("merge") or {}
    mirrors = mirror_status(config, catalog, merged.get("tables") or None)
    index = config.reports_path() / "data_docs" / "index.html"
    out = {"run_id": run_id, "stream": config.stream, "store": config.effective_store_url(),
           "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
           "params": params.to_json(), "steps": results, "mirrors": mirrors,
           "merged_end_lsn": _lsn(_merged_end(catalog, config)),
           "data_docs_index": str(index) if index.exists() else None}
    if not params.dry_run:
        text = json.dumps(out, indent=2, sort_keys=True, default=str)
        local = config.reports_path() / "runs" / f"{run_id}.json"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text)
        key = _layout(config).report_key(f"runs/{run_id}.json")
        open_store(config).put(key, text.encode())
        out["report_file"] = str(local)
        out["report_url"] = open_store(config).url(key)
    return out


def mirror_status(config: Config, catalog: Catalog,
                  tables: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every mirror of this stream (or of ``tables``): commit LSN, snapshot and row count."""
    from cdclake.lake.tables import SOURCE_TABLE, STREAM
    from cdclake.lake.visibility import facts_of
    from cdclake.lake.watermark import committed_lsn

    out: dict[str, dict[str, Any]] = {}
    if not catalog.namespace_exists(config.namespace):
        return out
    for ident in catalog.list_tables(config.namespace):
        table = catalog.load_table(ident)
        props = table.properties
        if props.get(STREAM) != config.stream or props.get("cdclake.kind", "mirror") != "mirror":
            continue
        source = props.get(SOURCE_TABLE, ".".join(ident))
        if tables is not None and source not in tables:
            continue
        snap = table.current_snapshot()
        summary = snap.summary.additional_properties if snap and snap.summary else {}
        facts = facts_of(props, source)
        out[source] = {"mirror": ".".join(ident), "commit_lsn": _lsn(committed_lsn(
            table, config.stream)), "snapshot_id": snap.snapshot_id if snap else None,
            "rows": int(summary.get("total-records", 0)),
            "initial_snapshot_lsn": _lsn(facts.lsn) if facts else None}
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
             on_progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``cdclake run``: the steps in order, in this process, as the DAG runs them
    (``on_progress`` gets the snapshot's progress lines).

    A failing step stops the run; the report is still written, with the error, so the
    operator finds what happened where the successful runs are. Returns the report.
    """
    params = params or RunParams()
    catalog = _catalog(config)
    results: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        results[name] = fn()
        if on_step is not None:
            on_step(name, results[name])
        return results[name]

    try:
        step("ship", lambda: ship(config, params))
        step("snapshot", lambda: snapshot(config, params, spark=spark, catalog=catalog,
                                          progress=on_progress))
        step("decode", lambda: decode(config, params, spark=spark))
        step("validate_stream", lambda: validate_stream(config, params, catalog=catalog))
        merged = step("merge", lambda: merge(config, params, catalog=catalog))
        step("validate_tables", lambda: validate_tables(config, params, merged,
                                                        catalog=catalog))
    except CdclakeError as exc:
        results["error"] = f"{type(exc).__name__}: {exc}"
        report(config, params, results, run_id=run_id, catalog=catalog)
        raise
    return report(config, params, results, run_id=run_id, catalog=catalog)


# -- helpers -----------------------------------------------------------------------------------


def _catalog(config: Config) -> Catalog:
    from cdclake.lake.catalog import open_catalog

    return open_catalog(config)


def _merged_end(catalog: Catalog, config: Config) -> int | None:
    from cdclake.lake.watermark import merged_end_lsn

    return merged_end_lsn(catalog, config.namespace, config.stream)
