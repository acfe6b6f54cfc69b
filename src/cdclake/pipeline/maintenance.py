"""``cdclake maintain`` and the ``cdclake_maintenance`` DAG: compact and expire the mirrors.

Runs :func:`cdclake.lake.maintenance.maintain_tables` on Spark under the stream's lake lease
(a merge in between would race the rewrites). Kept out of the ingest run: rewriting a large
table's files takes longer than a batch, and once a day is enough.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from cdclake.archive import open_store
from cdclake.archive.lease import LAKE, Lease
from cdclake.config import Config, positive_int


def maintain(config: Config, *, tables: Sequence[str] = (), keep_snapshots: int | None = None,
             keep_hours: float | None = None, spark: Any = None,
             catalog: Any = None) -> dict[str, Any]:
    """Maintain the namespace's tables; the settings default to the Config's."""
    from cdclake.lake.catalog import open_catalog
    from cdclake.lake.maintenance import maintain_tables
    from cdclake.sparkenv.session import session

    keep = config.keep_snapshots if keep_snapshots is None else keep_snapshots
    hours = config.keep_hours if keep_hours is None else keep_hours
    with Lease(open_store(config), LAKE, purpose=f"maintenance of stream {config.stream}",
               ttl=config.lease_ttl, wait=config.lease_wait):
        done = maintain_tables(config, catalog or open_catalog(config),
                               spark or session(config, "maintain"), retain_last=keep,
                               older_than=timedelta(hours=hours), tables=list(tables) or None)
    return {"tables": [t.to_json() for t in done], "keep_snapshots": keep, "keep_hours": hours}


def add_maintain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tables", default="",
                   help="comma-separated namespace.table to maintain (default: all)")
    p.add_argument("--keep-snapshots", type=positive_int, default=None,
                   help="snapshots kept per table (default: CDCLAKE_KEEP_SNAPSHOTS)")
    p.add_argument("--keep-hours", type=_hours, default=None,
                   help="age below which snapshots and unreferenced files are kept "
                        "(default: CDCLAKE_KEEP_HOURS)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run_maintain(args: argparse.Namespace, config: Config) -> int:
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    result = maintain(config, tables=tables, keep_snapshots=args.keep_snapshots,
                      keep_hours=args.keep_hours)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    for t in result["tables"]:
        print(f"{t['table']}: data files {t['data_files_before']} -> {t['data_files_after']}, "
              f"snapshots {t['snapshots_before']} -> {t['snapshots_after']}, "
              f"{t['orphan_files']} orphan file(s) removed")
    if not result["tables"]:
        print(f"no tables in namespace {config.namespace}")
    return 0


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise ValueError(f"not a number of hours: {text!r}") from None
    if hours < 0:
        raise ValueError(f"must not be negative, got {text}")
    return hours
