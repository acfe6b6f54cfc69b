"""The decoded batches in the store, and which of them the lake still has to take.

The pipeline keeps no state of its own between tasks: what is pending is derived every time
from two durable facts — the batches the decoder finished (each has a ``_manifest.json``,
written last) and the stream's merged end LSN in the Iceberg namespace (advanced only when a
batch was merged into every table). So a decode whose merge failed is not forgotten when the
next decode has nothing new, a retried task redoes exactly what is missing, and any task can
be re-run on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from cdclake.archive import Layout, ObjectStore
from cdclake.archive.arrowfs import arrow_filesystem
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake.batch import MANIFEST, Batch, parse_manifest

#: a placeholder batch name, only to derive the ``changes/`` prefix from the Layout
_PROBE = "x"


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A batch the decoder completed: its manifest and where it lives."""

    name: str
    start_lsn: int
    end_lsn: int
    commits: int
    manifest: dict[str, Any]

    @property
    def tables(self) -> list[str]:
        return [str(t["table"]) for t in self.manifest.get("tables", ())]

    def rows(self) -> dict[str, int]:
        """Change rows per table, from the manifest (no Parquet read)."""
        return {str(t["table"]): sum(int(v["rows"]) for v in t["versions"])
                for t in self.manifest.get("tables", ())}


def changes_prefix(layout: Layout) -> str:
    """``<prefix>/changes/``: the Layout builds per-batch keys only, so derive the parent."""
    return layout.changes_prefix(_PROBE)[: -len(_PROBE) - 1]


def list_batches(store: ObjectStore, layout: Layout) -> list[DecodedBatch]:
    """Every completed batch, in stream order (start LSN). A batch directory without a
    manifest is a decode that did not finish: it is not a batch yet and is skipped."""
    prefix = changes_prefix(layout)
    out = []
    for info in store.list(prefix):
        rest = info.key[len(prefix):]
        parts = rest.split("/")
        if len(parts) != 2 or parts[1] != MANIFEST:
            continue
        try:
            manifest = json.loads(store.get(info.key))
            out.append(DecodedBatch(str(manifest.get("batch", parts[0])),
                                    int(manifest["start_lsn"]), int(manifest["end_lsn"]),
                                    int(manifest.get("commits", 0)), manifest))
        except (ValueError, KeyError, TypeError) as exc:
            raise LakeError(f"batch {parts[0]}: manifest {store.url(info.key)} is not valid "
                            f"({type(exc).__name__}: {exc}); decode the batch again") from exc
    out.sort(key=lambda b: (b.start_lsn, b.end_lsn, b.name))
    return out


def pending(batches: list[DecodedBatch], merged_end_lsn: int | None) -> list[DecodedBatch]:
    """Batches not yet merged into every table (end past the stream's merged end LSN)."""
    return [b for b in batches if merged_end_lsn is None or b.end_lsn > merged_end_lsn]


def changes_root(config: Config, store: ObjectStore,
                 layout: Layout) -> tuple[str, pafs.FileSystem]:
    """Where :func:`cdclake.lake.batch.read_batch` finds the batches, and on which filesystem."""
    filesystem, root = arrow_filesystem(config, store.url(changes_prefix(layout)))
    return root, filesystem


def open_batch(config: Config, store: ObjectStore, layout: Layout,
               batch: DecodedBatch) -> Batch:
    """The lake's view of ``batch`` (tables read lazily), from the manifest already read."""
    root, filesystem = changes_root(config, store, layout)
    if filesystem is None:
        from cdclake.lake.batch import resolve_root

        filesystem, root = resolve_root(root, None)
    return parse_manifest(batch.manifest, batch.name, filesystem, f"{root}/{batch.name}")
