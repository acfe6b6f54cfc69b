"""An initial snapshot's side of the lake: the mirror it fills, and the one commit that fills it.

Before the copy, :func:`open_mirror` finds or creates the table's mirror and stages, in an
Iceberg transaction not yet committed, the schema the copied files are written in (the
mirror's schema evolved to the relation version the snapshot sees, by attnum as the merge
does). Workers write the files under ``<table location>/data/cdclake-snapshot-<run>/``;
:meth:`MirrorSnapshot.commit` then replaces every data file the mirror had with them, sets
the snapshot's handoff facts (:mod:`cdclake.lake.visibility`) and the enum labels, all in that
one transaction: readers see the old mirror or the new one, never a mix. The snapshot's
summary carries commit LSN 0, so the merge considers every change of the stream and skips,
by visibility, exactly those the copied rows already hold.

Files of a snapshot that never committed (the run died) are removed when the table is
snapshotted again (:meth:`MirrorSnapshot.remove_stale`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyarrow import fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake import labels
from cdclake.lake.schema import (
    apply_evolution,
    data_columns,
    iceberg_schema,
    mirror_system_fields,
    plan_evolution,
)
from cdclake.lake.tables import MIRROR, ensure_table, mirror_identifier
from cdclake.lake.visibility import PROPERTY, SnapshotFacts, facts_of, property_value
from cdclake.lake.watermark import summary_properties

log = logging.getLogger(__name__)

#: the directory under a mirror's ``data/`` that one snapshot run writes
DIRECTORY_PREFIX = "cdclake-snapshot-"


@dataclass
class MirrorSnapshot:
    """A mirror being replaced by a snapshot: its table, the staged transaction and schema."""

    table: Table
    tx: Transaction
    schema: Schema  #: the schema the files are written in (field ids included)
    source: str  #: ``schema.table``
    run: str  #: this snapshot run's id (names the file directory)
    enum_labels: labels.Labels = field(default_factory=dict)

    @property
    def directory(self) -> str:
        return f"{self.table.location().rstrip('/')}/data/{DIRECTORY_PREFIX}{self.run}"

    def file_location(self, index: int) -> str:
        return f"{self.directory}/{index:05d}.parquet"

    def commit(self, paths: Sequence[str], counts_only: Sequence[str], facts: SnapshotFacts,
               stream: str) -> int:
        """Replace the mirror's rows by the files at ``paths``; returns the new snapshot id."""
        tx = self.tx
        if counts_only:  # before the files' statistics are read (lake.metrics says why)
            tx.set_properties({f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{c}": "counts"
                               for c in sorted(set(counts_only))})
        tx.set_properties({PROPERTY: property_value(facts),
                           labels.PROPERTY: labels.property_value(self.enum_labels)})
        try:
            files = [parquet_file_to_data_file(self.table.io, tx.table_metadata, p)
                     for p in paths]
        except Exception as exc:
            raise LakeError(f"snapshot of {self.source}: cannot read back a copied file: "
                            f"{type(exc).__name__}: {exc}") from exc
        old = [task.file for task in self.table.scan().plan_files()]
        props = summary_properties(stream, f"snapshot-{self.run}", 0)
        update = tx.update_snapshot(snapshot_properties=props)
        with (update.overwrite() if old else update.fast_append()) as op:
            for f in old:
                op.delete_data_file(f)
            for f in files:
                op.append_data_file(f)
        try:
            committed = tx.commit_transaction()
        except CommitFailedException as exc:
            raise LakeError(f"snapshot of {self.source}: another writer committed to its "
                            f"mirror {'.'.join(self.table.name())} during the copy ({exc}); "
                            "nothing was replaced: run the snapshot again") from exc
        snap = committed.current_snapshot()
        assert snap is not None
        return snap.snapshot_id

    def remove_stale(self, filesystem: pafs.FileSystem, root: str) -> list[str]:
        """Delete snapshot directories under the mirror's ``data/`` that no committed
        snapshot wrote (left by a run that died before its commit); returns them.
        ``root`` is the table's ``data`` directory on ``filesystem``."""
        facts = facts_of(self.table.properties, self.source)
        keep = {f"{DIRECTORY_PREFIX}{facts.run}"} if facts is not None and facts.run else set()
        keep.add(f"{DIRECTORY_PREFIX}{self.run}")
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except OSError as exc:
            raise LakeError(f"snapshot of {self.source}: cannot list {root}: {exc}") from exc
        stale = [i.path for i in infos if i.type == pafs.FileType.Directory
                 and i.base_name.startswith(DIRECTORY_PREFIX) and i.base_name not in keep]
        for path in stale:
            log.info("snapshot of %s: removing %s, left by a snapshot that never committed",
                     self.source, path)
            filesystem.delete_dir(path)
        return stale


def open_mirror(catalog: Catalog, config: Config, rel: RelationVersion,
                stream_fields: Sequence[pa.Field], run: str) -> MirrorSnapshot:
    """The mirror of ``rel`` (created empty if new) with the snapshot's schema staged."""
    source = f"{rel.schema}.{rel.name}"
    arrow_schema = pa.schema(list(stream_fields))
    ident = mirror_identifier(config, rel.schema, rel.name)
    table = ensure_table(catalog, ident, iceberg_schema(rel, arrow_schema), stream=config.stream,
                         source_table=source, source_oid=rel.oid, kind=MIRROR)
    tx = table.transaction()
    apply_evolution(tx, plan_evolution(table.schema(), [data_columns(rel, arrow_schema)],
                                       source, mirror_system_fields()))
    return MirrorSnapshot(table, tx, tx.table_metadata.schema(), source, run,
                          snapshot_labels(rel, stream_fields))


def snapshot_labels(rel: RelationVersion, stream_fields: Sequence[pa.Field]) -> labels.Labels:
    """The enum labels of the copied rows, read from the change stream's fields exactly as
    the merge reads a batch's (``cdclake.enum-labels``)."""
    arrow_schema = pa.schema(list(stream_fields))
    names = {c.name: c.attnum for c in data_columns(rel, arrow_schema)}
    return labels.version_labels(arrow_schema, names)
