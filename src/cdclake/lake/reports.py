"""What a merge reports: per table and per batch, JSON-friendly (docs/lake.md, "Merge report").

Both merge engines fill them: the pyiceberg one (:mod:`cdclake.lake.arrowmerge`) and the
Spark one (:mod:`cdclake.lake.sparkmerge`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TableReport:
    """What the merge did to one mirror; every field is JSON-friendly."""

    table: str  #: source ``schema.table``
    mirror: str  #: Iceberg ``namespace.name``
    changes: int  #: change rows for this table in the batch
    skipped_applied: int = 0  #: change rows already applied by an earlier run (commit LSN <=)
    #: change rows of transactions the mirror's initial snapshot saw (already in its rows)
    skipped_snapshot: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    truncated: int = 0
    rewritten: int = 0  #: rows of table rewrites, which replaced the table's rows
    identity_nothing: int = 0  #: UPDATE/DELETE not applied: the table has no replica identity
    #: UPDATE/DELETE whose old row was not in the mirror (None: the Spark merge does not look)
    not_found: int | None = 0
    rows_written: int = 0  #: rows appended (new rows plus rows of the region written back)
    strategy: str = "none"  #: none, append, region, full-table, truncate
    schema_changes: list[str] = field(default_factory=list)
    previous_lsn: int | None = None  #: the table's commit LSN before this merge
    commit_lsn: int | None = None  #: the table's commit LSN after it
    snapshot_id: int | None = None  #: the table's current snapshot after it
    attempts: int = 0
    engine: str = "pyiceberg"  #: the MergeEngine that committed: pyiceberg or spark
    #: why the Spark engine declined this table, which the pyiceberg one merged ('' if not)
    fallback: str = ""
    #: why the merge quarantined the table instead ('' when it did not: lake.quarantine)
    quarantined: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MergeReport:
    """The merge of one batch: one entry per table (and per changelog table)."""

    batch: str
    stream: str
    tables: list[TableReport] = field(default_factory=list)
    changelogs: list[dict[str, Any]] = field(default_factory=list)
    #: tables not merged by choice: outside ``config.tables`` or the run's ``tables``, or in
    #: ``config.exclude_tables``
    excluded: list[str] = field(default_factory=list)
    #: tables whose merge failed: ``{"table", "oid", "error"}`` (one line); left for next run
    failed: list[dict[str, Any]] = field(default_factory=list)
    #: tables not merged because an earlier batch of the run failed for them
    held_back: list[str] = field(default_factory=list)
    #: tables left alone: ``{"table", "reason", "since_batch"}`` (cdclake.lake.quarantine)
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    previous_end_lsn: int | None = None  #: the stream's merged end LSN before this batch
    end_lsn: int | None = None  #: and after it (advanced when no table failed)

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "stream": self.stream,
                "previous_end_lsn": self.previous_end_lsn, "end_lsn": self.end_lsn,
                "tables": [t.to_json() for t in self.tables],
                "changelogs": self.changelogs, "excluded": self.excluded,
                "failed": self.failed, "held_back": self.held_back,
                "quarantined": self.quarantined}
