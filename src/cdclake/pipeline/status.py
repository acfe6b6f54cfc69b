"""``cdclake status``: where the stream stands, from the archive to each mirror.

Reads only: the manifest (what is archived, and any gap), the decoder's progress state and
what its next batch would be (the planner's own answer: segments, waiting for the install's
segment, nothing new — or the error that stops decoding, such as a segment missing below
archived ones), who holds the stream's leases (a run in progress), the decoded batches and
which of them the lake has taken, each mirror's commit LSN and, when the source is reachable,
its current WAL position — the places a stalled pipeline can be stuck, side by side.
:func:`stalled` says whether decoding is stopped: ``cdclake status`` then exits 1.
"""

from __future__ import annotations

from typing import Any

from cdclake.archive import Layout, ObjectStore, open_store
from cdclake.archive.lease import DECODE, LAKE, holder_of
from cdclake.archive.manifest import Manifest
from cdclake.catalog.connection import connect
from cdclake.config import Config
from cdclake.errors import CdclakeError, ConfigError, SourceError, StoreError
from cdclake.lake.pending import list_batches, pending
from cdclake.lsn import format_lsn, format_lsn_or_none, parse_lsn
from cdclake.spark.plan import Waiting, next_plan
from cdclake.stream.progress import Progress, load_progress


def status(config: Config) -> dict[str, Any]:
    """The stream's state as a JSON-able dict; a part that cannot be read says why instead
    of hiding the others.

    A home that does not exist, where the store or the catalog would be, is an error: looked
    at from the wrong directory (or with no configuration at all), the stream would show as
    empty rather than as not found."""
    if not config.home.is_dir() and not (config.store_url and config.catalog_uri):
        default = " (the default: CDCLAKE_HOME is not set)" \
            if "home" in config.defaults_in_use() else ""
        raise ConfigError(f"no cdclake home at {config.home}{default}: nothing ran with this "
                          "configuration here; set CDCLAKE_HOME (or CDCLAKE_CONFIG) to the "
                          "home of the stream to look at")
    store, layout = open_store(config), Layout()
    out: dict[str, Any] = {"stream": config.stream, "home": str(config.home),
                           "store": store.url()}

    manifest = Manifest(store, layout)
    system = manifest.system()
    names = manifest.names()
    archive: dict[str, Any] = {"segments": len(names), "first": names[0] if names else None,
                               "last": names[-1] if names else None}
    if system is not None:
        archive.update(pg_version=system.pg_version, segment_size=system.segment_size,
                       system_id=str(system.system_id))
        archive["gaps"] = [str(g) for g in manifest.gaps()]
    out["archive"] = archive

    try:
        progress = load_progress(store, layout)
        out["progress"] = progress.to_json() if progress else None  # None: nothing decoded yet
        out["decode"] = _next_batch(config, store, layout, progress)
    except StoreError as exc:
        out["progress"] = {"error": str(exc)}
    out["leases"] = {name: holder_of(store, name, layout) for name in (DECODE, LAKE)}

    batches = list_batches(store, layout)
    try:
        from cdclake.lake.catalog import open_catalog
        from cdclake.lake.tables import mirror_status
        from cdclake.lake.watermark import merged_end_lsn

        catalog = open_catalog(config, create=False)
        merged = merged_end_lsn(catalog, config.namespace, config.stream)
        out["lake"] = {"namespace": config.namespace, "merged_end_lsn": format_lsn_or_none(merged),
                       "mirrors": mirror_status(config, catalog)}
    except CdclakeError as exc:
        merged = None
        out["lake"] = {"error": str(exc)}
    todo = pending(batches, merged)
    out["batches"] = {"decoded": len(batches), "last": batches[-1].name if batches else None,
                      "last_end_lsn": format_lsn(batches[-1].end_lsn) if batches else None,
                      "pending_merge": [b.name for b in todo]}
    if config.source_dsn:
        out["source"] = _source_position(config.source_dsn)
    return out


def _next_batch(config: Config, store: ObjectStore, layout: Layout,
                progress: Progress | None) -> dict[str, Any]:
    """What the next decode would do: its segments, what it waits for, or why it cannot."""
    try:
        plan = next_plan(config, store, layout, progress)
    except SourceError as exc:  # where the install's message is: the source did not say
        return {"unknown": str(exc)}
    except CdclakeError as exc:
        return {"error": str(exc)}
    if isinstance(plan, Waiting):
        return {"waiting": plan.reason}
    return {"next": plan.segments if plan is not None else []}


def stalled(data: dict[str, Any]) -> bool:
    """Whether decoding is stopped: the next decode would fail (a missing segment, a missing
    history file, a progress state that cannot be read), not merely wait."""
    return "error" in (data.get("decode") or {}) or "error" in (data.get("progress") or {})


def _source_position(dsn: str) -> dict[str, Any]:
    """The source's current WAL position and archiver state (a lag is read against it)."""
    try:
        with connect(dsn, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT pg_current_wal_lsn()::text, last_archived_wal, failed_count, "
                "last_failed_wal FROM pg_stat_archiver").fetchone()
    except Exception as exc:  # status must still print the rest
        return {"error": f"cannot reach the source: {exc}"}
    assert row is not None
    return {"current_wal_lsn": format_lsn(parse_lsn(row[0])), "last_archived_wal": row[1],
            "archive_failures": row[2], "last_failed_wal": row[3]}


def format_status(data: dict[str, Any]) -> str:
    """A few lines a person reads at a glance; ``--json`` gives everything."""
    a = data["archive"]
    lines = [f"stream {data['stream']} at {data['store']} (home {data['home']})",
             f"archive: {a['segments']} segment(s)"
             + (f", {a['first']} .. {a['last']}" if a["segments"] else "")
             + (f"; GAPS: {'; '.join(a['gaps'])}" if a.get("gaps") else "")]
    if "source" in data:
        s = data["source"]
        lines.append(f"source: {s['error']}" if "error" in s else
                     f"source: current WAL {s['current_wal_lsn']}, last archived "
                     f"{s['last_archived_wal']}, archive failures {s['archive_failures']}")
    d = data.get("decode") or {}
    if "error" in d:
        lines.append(f"decode: STALLED: {d['error']}")
    elif "waiting" in d:
        lines.append(f"decode: {d['waiting']}")
    elif "unknown" in d:
        lines.append(f"decode: next batch unknown: {d['unknown']}")
    elif "next" in d:
        n = d["next"]
        lines.append("decode: nothing new to decode" if not n else f"decode: next batch {n[0]}"
                     + (f"..{n[-1]} ({len(n)} segments)" if len(n) > 1 else ""))
    b = data["batches"]
    progress = data.get("progress") or {}
    lines.append(f"decoded: {b['decoded']} batch(es), last {b['last']} ending at "
                 f"{b['last_end_lsn']}"
                 + (f", following timeline {progress['timeline']}" if "timeline" in progress
                    else "")
                 + f"; waiting for merge: {len(b['pending_merge'])}"
                 + (f" ({', '.join(b['pending_merge'])})" if b["pending_merge"] else ""))
    for name, held in sorted(data.get("leases", {}).items()):
        if held:
            lines.append(f"running: the {name} lease is held by {held['holder']} until "
                         f"{held['until']}")
    lake = data["lake"]
    if "error" in lake:
        lines.append(f"lake: {lake['error']}")
    else:
        lines.append(f"lake: namespace {lake['namespace']}, merged up to "
                     f"{lake['merged_end_lsn']}")
        for source, m in sorted(lake["mirrors"].items()):
            copied = (f", initial snapshot at {m['initial_snapshot_lsn']}"
                      if m.get("initial_snapshot_lsn") else "")
            held = f"; QUARANTINED: {m['quarantined']}" if m.get("quarantined") else ""
            lines.append(f"  {source} -> {m['mirror']}: {m['rows']} row(s), commit LSN "
                         f"{m['commit_lsn']}{copied}{held}")
            if m.get("inexact"):
                lines.append(f"    INEXACT: {m['inexact']}")
    return "\n".join(lines)
