"""Finding, creating and committing to cdclake's Iceberg tables.

A table is tied to its source by stream and relation oid (table properties), not only by name:
when the source table is renamed, the next batch names a mirror that does not exist yet, and
the mirror under the old name is found by oid and renamed instead of a new, empty one being
started. A name whose table belongs to another oid means the source table was dropped and
created again; that fails the table's merge (the others go on) rather than mixing two
tables' rows.

Commits follow Iceberg core's rule: retry only when the catalog says the commit conflicted
(``CommitFailedException``) — and then recompute from the refreshed table, never re-send the old
commit; when the outcome is unknown, re-read the table and decide from its summary LSN.
pyiceberg's own retry (which would rebase our commit on a concurrent one) is switched off per
table for that reason.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import AlwaysTrue, And, GreaterThan, In, Or
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, StringType

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import LakeError
from cdclake.lake import inexact
from cdclake.lake.changes import KEY, Identity
from cdclake.lake.datafiles import DataFiles
from cdclake.lake.inexact import inexact_of
from cdclake.lake.pending import chunked
from cdclake.lake.quarantine import quarantine_of
from cdclake.lake.schema import CDC_COMMIT_LSN
from cdclake.lake.visibility import facts_of
from cdclake.lake.watermark import STREAM, committed_lsn
from cdclake.lsn import format_lsn_or_none

log = logging.getLogger(__name__)

# the properties of a cdclake table; its stream is under ``STREAM``, the key snapshot
# summaries name the stream by (lake.watermark)
SOURCE_OID = "cdclake.source-oid"
SOURCE_TABLE = "cdclake.source-table"
KIND = "cdclake.kind"
#: the kinds of table a stream has: a mirror of a source table, or its changelog
MIRROR = "mirror"
CHANGELOG = "changelog"

T = TypeVar("T")


def mirror_identifier(config: Config, schema: str, table: str) -> tuple[str, str]:
    """The mirror of ``schema.table``: ``(<namespace>, "<schema>__<table>")``. One flat
    namespace, because Glue and Hive catalogs have no nested ones."""
    return (config.namespace, f"{schema}__{table}")


def changelog_identifier(config: Config, schema: str, table: str) -> tuple[str, str]:
    """The changelog of ``schema.table``: the mirror's name plus ``__changelog``."""
    ns, name = mirror_identifier(config, schema, table)
    return (ns, f"{name}__changelog")


def find_mirror(catalog: Catalog, config: Config, schema: str, table: str,
                oid: int) -> tuple[str, str] | None:
    """The existing mirror of ``schema.table`` (by name, or by oid after a rename), if any."""
    ident = mirror_identifier(config, schema, table)
    if catalog.table_exists(ident):
        return ident
    return _find_by_oid(catalog, config.namespace, config.stream, oid, MIRROR)


def ensure_table(catalog: Catalog, identifier: tuple[str, str], schema: Schema, *,
                 stream: str, source_table: str, source_oid: int, kind: str) -> Table:
    """The table for this source table, found by name or by oid, or newly created."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        moved = _find_by_oid(catalog, identifier[0], stream, source_oid, kind)
        if moved is not None:
            log.info("source table %s was renamed: renaming %s to %s", source_table,
                     ".".join(moved), ".".join(identifier))
            catalog.rename_table(moved, identifier)
        else:
            catalog.create_namespace_if_not_exists(identifier[0])
            props = {SOURCE_OID: str(source_oid), SOURCE_TABLE: source_table, STREAM: stream,
                     KIND: kind, "commit.retry.num-retries": "0", "format-version": "2"}
            # another run may have created it a moment ago: then use that one
            with contextlib.suppress(TableAlreadyExistsError):
                catalog.create_table(identifier, schema, properties=props)
        table = catalog.load_table(identifier)
    _check_owner(table, identifier, stream, source_table, source_oid, kind)
    return table


def _check_owner(table: Table, identifier: tuple[str, str], stream: str, source_table: str,
                 source_oid: int, kind: str) -> None:
    props = table.properties
    name = ".".join(identifier)
    if props.get(SOURCE_OID) is None:
        raise LakeError(f"Iceberg table {name} exists but was not created by cdclake (no "
                        f"{SOURCE_OID} property); drop or rename it to mirror {source_table}")
    if props.get(STREAM) != stream or props.get(KIND, kind) != kind:
        raise LakeError(f"Iceberg table {name} is the {props.get(KIND)} of stream "
                        f"{props.get(STREAM)!r}, not the {kind} of stream {stream!r}")
    if props[SOURCE_OID] != str(source_oid):
        raise LakeError(
            f"Iceberg table {name} mirrors relation oid {props[SOURCE_OID]}, but {source_table} "
            f"is now oid {source_oid}: the source table was dropped and created again. Drop or "
            f"rename the old mirror, then run again (its initial snapshot fills the new one)")


def _find_by_oid(catalog: Catalog, namespace: str, stream: str, oid: int,
                 kind: str) -> tuple[str, str] | None:
    try:
        identifiers = catalog.list_tables(namespace)
    except Exception:  # no namespace yet: nothing to find
        return None
    for ident in identifiers:
        try:
            props = catalog.load_table(ident).properties
        except NoSuchTableError:
            continue
        if (props.get(SOURCE_OID) == str(oid) and props.get(STREAM) == stream
                and props.get(KIND) == kind):
            return (ident[0], ident[-1]) if len(ident) == 2 else (namespace, ident[-1])
    return None


def commit_with_retry(load: Callable[[], Table], attempt: Callable[[Table], T], *,
                      stream: str, target_lsn: int, done: Callable[[Table], T],
                      what: str, max_attempts: int = 5,
                      advice: Callable[[], str] | None = None) -> T:
    """Run ``attempt`` (which computes from the table it is given and commits) until it commits.

    ``done`` builds the result when an unknown-outcome commit turns out to have landed (the
    table's summary LSN reached ``target_lsn``). Any other failure (storage, catalog) committed
    nothing: it becomes a LakeError naming ``what`` and ending with ``advice()`` (by default:
    re-run the merge).
    """
    try:
        return _commit_with_retry(load, attempt, stream=stream, target_lsn=target_lsn,
                                  done=done, what=what, max_attempts=max_attempts)
    except LakeError:
        raise
    except Exception as exc:
        then = advice() if advice else "re-run the merge when the cause is fixed"
        raise LakeError(f"{what} failed ({type(exc).__name__}: {exc}); {then}") from exc


def _commit_with_retry(load: Callable[[], Table], attempt: Callable[[Table], T], *,
                       stream: str, target_lsn: int, done: Callable[[Table], T],
                       what: str, max_attempts: int) -> T:
    for n in range(1, max_attempts + 1):
        table = load()
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                return attempt(table)
        except CommitFailedException as exc:
            log.warning("%s: commit conflicted (attempt %d/%d): %s", what, n, max_attempts, exc)
        except CommitStateUnknownException as exc:
            table = load()
            lsn = committed_lsn(table, stream)
            if lsn is not None and lsn >= target_lsn:
                return done(table)
            log.warning("%s: commit outcome unknown and not applied (attempt %d/%d): %s",
                        what, n, max_attempts, exc)
    raise LakeError(f"{what}: the commit conflicted with concurrent writers {max_attempts} "
                    "times; nothing was applied for this table. Is another merge of the same "
                    "stream running? Re-run when it is done.")


def table_loader(catalog: Catalog, config: Config, ident: tuple[str, str], schema: Schema,
                 latest: RelationVersion, oid: int, kind: str) -> Callable[[], Table]:
    """What :func:`commit_with_retry` loads to commit a source table's changes (``latest``:
    its newest relation version, ``oid``): its table of ``kind`` (mirror or changelog) under
    ``ident``, created on first use."""

    def load() -> Table:
        return ensure_table(catalog, ident, schema, stream=config.stream,
                            source_table=f"{latest.schema}.{latest.name}",
                            source_oid=oid, kind=kind)

    return load


def snapshot_id(table: Table) -> int | None:
    """The table's current Iceberg snapshot, None while it has none (for reports)."""
    snap = table.current_snapshot()
    return snap.snapshot_id if snap else None


def mirror_status(config: Config, catalog: Catalog,
                  tables: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Where every mirror of this stream (or of ``tables``) stands, keyed by source table:
    commit LSN, Iceberg snapshot, row count, initial snapshot LSN and, for a quarantined
    table (:mod:`cdclake.lake.quarantine`), why, and for an inexact one
    (:mod:`cdclake.lake.inexact`) how it differs and the way out (for reports and ``cdclake
    status``)."""
    out: dict[str, dict[str, Any]] = {}
    if not catalog.namespace_exists(config.namespace):
        return out
    for ident in catalog.list_tables(config.namespace):
        table = catalog.load_table(ident)
        props = table.properties
        if props.get(STREAM) != config.stream or props.get(KIND, MIRROR) != MIRROR:
            continue
        source = props.get(SOURCE_TABLE, ".".join(ident))
        if tables is not None and source not in tables:
            continue
        snap = table.current_snapshot()
        summary = snap.summary.additional_properties if snap and snap.summary else {}
        facts = facts_of(props, source)
        held = quarantine_of(props)
        differs = inexact_of(props)
        out[source] = {
            "mirror": ".".join(ident),
            "commit_lsn": format_lsn_or_none(committed_lsn(table, config.stream)),
            "snapshot_id": snap.snapshot_id if snap else None,
            "rows": int(summary.get("total-records", 0)),
            "initial_snapshot_lsn": format_lsn_or_none(facts.lsn) if facts else None,
            "quarantined": held.get("reason", "") if held else None,
            "inexact": inexact.warning(source, differs) if differs else None}
    return out


def inexact_marks(config: Config, catalog: Catalog,
                  relations: Mapping[str, RelationVersion]) -> dict[str, dict[str, Any]]:
    """The inexact marks (:mod:`cdclake.lake.inexact`) of the mirrors of ``relations`` that
    have one, by source table."""
    out = {}
    for table, rel in relations.items():
        ident = mirror_identifier(config, rel.schema, rel.name)
        if catalog.table_exists(ident):
            mark = inexact_of(catalog.load_table(ident).properties)
            if mark is not None:
                out[table] = mark
    return out


def mirror_chunks(config: Config, catalog: Catalog, relations: Mapping[str, RelationVersion],
                  *, since: Mapping[str, int | None] | None = None,
                  columns: Callable[[RelationVersion, pa.Schema], Sequence[str]] | None = None,
                  max_rows: int = 1_000_000
                  ) -> tuple[Iterator[tuple[str, RelationVersion, pa.Table]], list[str]]:
    """The rows of the mirror of each source table in ``relations`` (keyed as given), as
    chunks of at most ``max_rows`` rows and :data:`~cdclake.lake.pending.CHUNK_BYTES` read
    one at a time (``columns``: only those the function names for the relation and the
    mirror's Arrow schema), and the keys that have no mirror: the table is outside
    ``config.tables``, or no change of it was merged yet.

    Without ``since`` each mirror is read whole (the scheduled full check). With it (source
    table -> the commit LSN its mirror had before the run; None: read it whole), only what the
    run can have broken is read: the rows it wrote (``_cdc_commit_lsn`` above that LSN, so
    data files written before are pruned by their metrics) and, for a table with a key and at
    most :data:`MAX_CHECKED_KEYS` rows written, the stored rows with the same keys (a key
    written twice shows up as a duplicate). The cost follows the run's changes, not the table.
    """
    found, missing = existing_mirrors(config, catalog, relations)

    def chunks() -> Iterator[tuple[str, RelationVersion, pa.Table]]:
        for name, rel, table in found:
            lsn = since.get(name) if since is not None else None
            schema = table.schema()
            fields = ("*",) if columns is None else tuple(
                c for c in columns(rel, schema.as_arrow()) if c in schema.column_names)
            pieces = (_read(table, fields) if lsn is None
                      else _written_since(table, rel, lsn, fields))
            for chunk in chunked(pieces, max_rows):
                yield name, rel, chunk
                del chunk  # not held while the next is read
    return chunks(), missing


def _read(table: Table, fields: tuple[str, ...], row_filter: Any = None
          ) -> Iterator[pa.RecordBatch]:
    """The scan's record batches, a data file at a time and a batch at a time
    (:mod:`cdclake.lake.datafiles`): pyiceberg's own batch reader reads every file of the scan
    at once on its thread pool (each into a list), so it would hold the whole table."""
    scan = table.scan(row_filter=row_filter if row_filter is not None else AlwaysTrue(),
                      selected_fields=fields)
    files = DataFiles(scan.table_metadata, scan.io, scan.projection(), scan.row_filter)
    batches = (b for task in scan.plan_files() for b in files.batches(task))
    # as pyiceberg's reader: each file's batches in the table's types (files written at
    # different times may hold string or large_string)
    target = schema_to_pyarrow(scan.projection())
    yield from pa.RecordBatchReader.from_batches(target, batches).cast(target)


def existing_mirrors(config: Config, catalog: Catalog, relations: Mapping[str, RelationVersion]
                     ) -> tuple[list[tuple[str, RelationVersion, Table]], list[str]]:
    """The mirror of each source table in ``relations`` that has one (name order), and the
    names of those that have none."""
    found: list[tuple[str, RelationVersion, Table]] = []
    missing: list[str] = []
    for name, rel in sorted(relations.items()):
        ident = mirror_identifier(config, rel.schema, rel.name)
        if catalog.table_exists(ident):
            found.append((name, rel, catalog.load_table(ident)))
        else:
            missing.append(name)
    return found, missing


def key_columns(rel: RelationVersion) -> list[str]:
    """The names of the replica identity key's columns ([] for a table without a key)."""
    identity = Identity.of(rel)
    return [rel.column_by_attnum(a).name for a in identity.attnums] if identity.kind == KEY else []


#: key types whose Python values pyiceberg binds as they come from Arrow
_KEY_TYPES = (IntegerType, LongType, StringType)
#: the most keys a run's check looks up in the stored rows (an ``In`` filter per key column)
MAX_CHECKED_KEYS = 10_000


def _written_since(table: Table, rel: RelationVersion, lsn: int, fields: tuple[str, ...]
                   ) -> Iterator[pa.RecordBatch]:
    run = GreaterThan(CDC_COMMIT_LSN, lsn)  # type: ignore[call-arg,arg-type]
    schema = table.schema()
    keys = key_columns(rel)
    written = _read(table, fields, run)
    if not keys or not all(isinstance(schema.find_field(k).field_type, _KEY_TYPES)
                           for k in keys):
        yield from written
        return
    head: list[pa.RecordBatch] = []  # up to MAX_CHECKED_KEYS rows, whose keys are looked up
    rows = 0
    for piece in written:
        head.append(piece)
        rows += piece.num_rows
        if rows > MAX_CHECKED_KEYS:  # too many to look up: the written rows alone
            yield from head
            yield from written
            return
    values = [{v for b in head for v in b.column(k).to_pylist() if v is not None}
              for k in keys]
    if not rows or not all(values):
        yield from head
        return
    terms = [In(k, v) for k, v in zip(keys, values, strict=True)]  # type: ignore[call-arg,arg-type]
    same_keys = terms[0] if len(terms) == 1 else And(*terms)
    # the written rows (a null key among them) and the stored rows sharing their keys
    yield from _read(table, fields, Or(run, same_keys))


def row_count(table: Table) -> int | None:
    """The table's rows as its current snapshot's summary counts them (None: unknown)."""
    snap = table.current_snapshot()
    if snap is None or snap.summary is None:
        return None
    total = snap.summary.additional_properties.get("total-records")
    return int(total) if total is not None else None
