"""The merge protocol: how one table's changes of a batch reach its mirror.

:func:`cdclake.lake.merge.merge_batch` drives a batch table by table and leaves each table to
a :class:`MergeEngine`, which the pipeline chooses (``CDCLAKE_MERGE_ENGINE``): the pyiceberg
engine (:class:`cdclake.lake.arrowmerge.ArrowMerge`, in this process) or the Spark one
(:class:`cdclake.lake.sparkmerge.SparkMerge`, on the executors), which hands the tables it
cannot take exactly to the pyiceberg engine. The driver owns what is common to every engine
— table selection, quarantine, one table's failure not stopping the others, the changelog,
the stream's merged end LSN — and an engine owns one table's commit.

What every engine promises, so the driver and the pipeline can rely on it whichever runs:

- **Order.** A table's changes are applied in the stream's order (commit LSN, LSN, seq);
  batches reach a table in LSN order (the driver refuses one that starts past the stream's
  merged end).
- **Idempotency.** Changes at or below the mirror's commit LSN (its snapshot summary) are
  skipped, and so are those of transactions the mirror's initial snapshot saw: merging a
  batch again commits nothing, and a batch merged in part (a crash between tables) is
  completed, never applied twice.
- **Atomicity.** What a table gets of a batch lands in one Iceberg commit (or one
  transaction) whose last snapshot carries the batch's last commit LSN in its summary: the
  rows and the watermark land together or not at all.
- **Failure.** An error leaves the mirror at its previous commit LSN and is raised as a
  :class:`cdclake.errors.CdclakeError` with one line naming the table (the driver reports it
  and goes on with the next table); a lost lease is raised as ConcurrentRunError.
- **Quarantine.** A batch the mirror cannot hold exactly (:mod:`cdclake.lake.quarantine`) is
  not applied at all: the report's ``quarantined`` says why.
- **Report.** The :class:`cdclake.lake.reports.TableReport` names the engine that committed,
  and ``fallback`` says why another engine took the table when one declined it.
"""

from __future__ import annotations

from typing import Protocol

from cdclake.lake.batch import Batch, TableChanges, TableEntry
from cdclake.lake.reports import TableReport


class MergeEngine(Protocol):
    """Commits one table's changes of a batch to its mirror (the module doc's promises)."""

    @property
    def name(self) -> str:
        """The engine's name, as ``TableReport.engine`` shows it."""
        ...

    def merge_table(self, batch: Batch, entry: TableEntry, *,
                    loaded: TableChanges | None = None) -> TableReport:
        """Merge ``entry``'s changes of ``batch`` (``loaded``: those changes, if the caller
        read them already)."""
        ...
