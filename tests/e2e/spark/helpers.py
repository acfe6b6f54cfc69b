"""Reading change streams back for comparison, and the single-process reference decode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import fs as pafs

from cdclake.archive.layout import Layout
from cdclake.archive.ship import ship
from cdclake.catalog.dictionary import Dictionary
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import ArrowChanges
from cdclake.decoding.session import DecodeOptions, decode
from cdclake.lake.batch import read_batch
from cdclake.wal.source import DirectorySource
from tests.e2e.spark.workload import Archived


def local_decode(archived: Archived, root: Path, spill: Path) -> dict[str, Any]:
    """The reference: one process, all segments, ArrowChanges; its manifest."""
    fs = pafs.LocalFileSystem()
    plugins: list[ArrowChanges] = []

    def make(d: Dictionary, _version: int) -> ArrowChanges:
        plugins.append(ArrowChanges(fs, str(root / "local"), "local", d.types))
        return plugins[0]

    source = DirectorySource(archived.directory)
    options = DecodeOptions(db_oid=archived.db_oid, start_lsn=0, spill_dir=spill,
                            ddl_key=archived.key)
    result = decode(source, Dictionary(), options, make)
    first = source.list_segments()[0].segno * source.segment_size
    return plugins[0].close(first, result.end_lsn)


def tables_of(root: str | Path, batches: list[str],
              filesystem: pafs.FileSystem | None = None) -> dict[str, pa.Table]:
    """Every table's rows over ``batches`` in order (versions concatenated, nulls promoted)."""
    parts: dict[str, list[pa.Table]] = {}
    for name in batches:
        for t in read_batch(root, name, filesystem):
            for v in t.versions:
                parts.setdefault(t.table, []).append(v.changes)
    return {name: pa.concat_tables(ts, promote_options="default") for name, ts in parts.items()}


def ship_to(config: Config, archived: Archived) -> None:
    report = ship(config, archived.directory, layout=Layout())
    assert sorted(report.shipped) == sorted(archived.segments)


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()
