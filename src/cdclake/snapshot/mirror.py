"""The mirror an initial snapshot fills, and the one commit that fills it.

Before the copy, :func:`open_mirror` finds or creates the table's mirror and stages, in an
Iceberg transaction not yet committed, the schema the copied files are written in (the
mirror's schema evolved to the relation version the snapshot sees, by attnum as the merge
does). Workers write the files under ``<table location>/data/cdclake-snapshot-<run>/``;
:meth:`MirrorSnapshot.commit` then replaces every data file the mirror had with them, sets
the snapshot's handoff facts (:mod:`cdclake.lake.visibility`) and the enum labels, and ends a
quarantine (:mod:`cdclake.lake.quarantine`), all in that one transaction: readers see the old
mirror or the new one, never a mix. The snapshot's summary carries commit LSN 0, so the merge
considers every change of the stream and skips, by visibility, exactly those the copied rows
already hold.

Files of a snapshot that never committed are removed once no commit can reference them any
more (:meth:`MirrorSnapshot.remove_stale`). The staged transaction commits only while the
mirror's current snapshot is still the one it was opened on (pyiceberg's
``AssertRefSnapshotId``; cdclake's mirrors have ``commit.retry.num-retries = 0``, so no commit
is rebased onto a newer snapshot): that snapshot is in the run's directory name, and the
directory is dead once the mirror has moved past it — not merely because its run looks
finished, which a stalled run that lost the lake lease does too.
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
from pyiceberg.table.snapshots import ancestors_of

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake import inexact, labels, quarantine
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
_ON = "-on-"


@dataclass
class MirrorSnapshot:
    """A mirror being replaced by a snapshot: its table, the staged transaction and schema."""

    table: Table
    tx: Transaction
    schema: Schema  #: the schema the files are written in (field ids included)
    source: str  #: ``schema.table``
    run: str  #: this snapshot run's id (names the file directory)
    enum_labels: labels.Labels = field(default_factory=dict)
    #: the mirror's current snapshot when the transaction was staged (None: it had none):
    #: the commit succeeds only while it still is
    base: int | None = None

    @property
    def directory(self) -> str:
        """``data/cdclake-snapshot-<run>-on-<base snapshot id, or none>``."""
        return (f"{self.table.location().rstrip('/')}/data/{DIRECTORY_PREFIX}{self.run}"
                f"{_ON}{'none' if self.base is None else self.base}")

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
        ended = [m for m in (quarantine.PROPERTY, inexact.PROPERTY)  # a new copy ends them
                 if m in tx.table_metadata.properties]
        if ended:
            tx.remove_properties(*ended)
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
        """Delete snapshot directories under the mirror's ``data/`` whose run can no longer
        commit — the mirror's current snapshot has moved past the one the run was staged on
        — and that no committed snapshot wrote; returns them. ``root`` is the table's
        ``data`` directory on ``filesystem``.

        The directories are listed before the mirror is read again, so a run listed here was
        staged on a snapshot the mirror had by then: one not in the table's history any more
        was expired, long before the current one."""
        try:
            infos = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        except OSError as exc:
            raise LakeError(f"snapshot of {self.source}: cannot list {root}: {exc}") from exc
        table = self.table.catalog.load_table(self.table.name())
        current = table.current_snapshot()
        if current is None:  # nothing committed yet: any staged run may still commit
            return []
        passed = {s.snapshot_id for s in ancestors_of(current, table.metadata)}
        known = {s.snapshot_id for s in table.snapshots()}
        facts = facts_of(table.properties, self.source)
        keep = {run for run in (self.run, facts.run if facts is not None else None) if run}

        def dead(name: str) -> bool:
            run, on, base = name.removeprefix(DIRECTORY_PREFIX).rpartition(_ON)
            if not on:  # named before runs named their base: from an older cdclake
                return name.removeprefix(DIRECTORY_PREFIX) not in keep
            if run in keep:
                return False
            if base == "none":
                return True
            sid = int(base)
            return sid != current.snapshot_id and (sid in passed or sid not in known)

        stale = [i.path for i in infos if i.type == pafs.FileType.Directory
                 and i.base_name.startswith(DIRECTORY_PREFIX) and dead(i.base_name)]
        for path in stale:
            log.info("snapshot of %s: removing %s, left by a snapshot that can no longer "
                     "commit", self.source, path)
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
    # every stored row is replaced: a column of another type is replaced with them
    apply_evolution(tx, plan_evolution(table.schema(), data_columns(rel, arrow_schema),
                                       source, mirror_system_fields()))
    base = table.current_snapshot()
    return MirrorSnapshot(table, tx, tx.table_metadata.schema(), source, run,
                          snapshot_labels(rel, stream_fields),
                          None if base is None else base.snapshot_id)


def snapshot_labels(rel: RelationVersion, stream_fields: Sequence[pa.Field]) -> labels.Labels:
    """The enum labels of the copied rows, read from the change stream's fields exactly as
    the merge reads a batch's (``cdclake.enum-labels``)."""
    arrow_schema = pa.schema(list(stream_fields))
    names = {c.name: c.attnum for c in data_columns(rel, arrow_schema)}
    return labels.version_labels(arrow_schema, names)
