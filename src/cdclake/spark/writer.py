"""The driver's half of commit emit: merge partitions' rows in commit order and write a batch.

Each transaction was emitted whole by one partition, so ordering the rows of a relation
version by (``_commit_lsn``, ``_lsn``, ``_seq``) restores exactly the order a single-process
decode produces; files, part sizes and the manifest come from the same functions the Arrow
plugin uses (:func:`cdclake.decoding.plugins.arrow.write_part` / ``build_manifest``), so the
stream is the one a local ``ArrowChanges`` run writes for the same WAL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

from cdclake.catalog.model import RelationVersion
from cdclake.decoding import stream
from cdclake.decoding.plugins.arrow import build_manifest, write_manifest, write_part
from cdclake.spark.partition import RowKey, VersionRows

_ORDER = [(stream.COMMIT_LSN, "ascending"), (stream.LSN, "ascending"),
          (stream.SEQ, "ascending")]


def merge_versions(parts: Iterable[VersionRows]) -> list[tuple[RelationVersion, RowKey,
                                                                 pa.Table]]:
    """One table per relation version, rows in stream order; versions by their first row."""
    groups: dict[str, tuple[RelationVersion, RowKey, list[pa.Table]]] = {}
    for v in parts:
        key = json.dumps(v.relation.to_json(), sort_keys=True)
        seen = groups.get(key)
        if seen is None:
            groups[key] = (v.relation, v.first, list(v.tables))
        else:
            seen[2].extend(v.tables)
            groups[key] = (seen[0], min(seen[1], v.first), seen[2])
    out = []
    for rel, first, tables in sorted(groups.values(), key=lambda g: g[1]):
        table = pa.concat_tables(tables)
        table = table.take(pc.sort_indices(table, sort_keys=_ORDER))
        out.append((rel, first, table))
    return out


def write_stream(fs: pafs.FileSystem, root: str, batch: str, parts: Iterable[VersionRows],
                 commits: int, start_lsn: int, end_lsn: int,
                 rows_per_part: int) -> dict[str, Any]:
    """Write ``root`` (the batch directory) and its manifest, last; returns the manifest."""
    root = root.rstrip("/")
    entries = []
    for rel, _first, table in merge_versions(parts):
        paths = [write_part(fs, root, rel, i, table.slice(off, rows_per_part))
                 for i, off in enumerate(range(0, table.num_rows, rows_per_part))]
        entries.append((rel, paths, table.num_rows))
    manifest = build_manifest(batch, start_lsn, end_lsn, commits, entries)
    write_manifest(fs, root, manifest)
    return manifest
