"""How the workers of a parallel decode share out the changes: by stripes of WAL.

Worker ``index`` of ``jobs`` emits the changes in the stripes where ``(top-level xid +
stripe) % jobs == index``, a stripe being ``2**bits`` bytes of WAL (:mod:`cdclake.decoding.parallel`
explains why). The decoder asks before it parses a change, the replayer before it emits one
(``Decoder.share``, ``Replayer.share``); the compiled twins of both ask inline
(``decoding/_stripes.pxd``).
"""

from __future__ import annotations

#: a stripe is 2**STRIPE_BITS bytes of WAL (256 KiB)
STRIPE_BITS = 18


def stripe_owner(top: int, lsn: int, jobs: int, bits: int = STRIPE_BITS) -> int:
    """Which of ``jobs`` workers (or Spark partitions, :mod:`cdclake.spark.routing`) emits
    the change at ``lsn`` of top-level transaction ``top``."""
    return (top + (lsn >> bits)) % jobs


class Shares:
    """Which changes worker ``index`` of ``jobs`` emits. It remembers the last LSN it said
    yes to: the replayer asks right before emitting a change, so that is where the change's
    lines go (the parallel decode's framer)."""

    __slots__ = ("bits", "index", "jobs", "last")

    def __init__(self, index: int, jobs: int, bits: int = STRIPE_BITS) -> None:
        self.index = index
        self.jobs = jobs
        self.bits = bits
        self.last = 0

    def stripe(self) -> int:
        """The stripe of the change said yes to last."""
        return self.last >> self.bits

    def alone(self, top: int, first_lsn: int, final_lsn: int) -> bool:
        """Whether no other worker writes a line of the transaction ``top`` whose records
        lie from ``first_lsn`` to its commit record at ``final_lsn``: they lie in one stripe,
        this worker's. Then every change of it, and its commit, are this worker's share; another
        worker replays it only for what every worker buffers (TOAST chunks, speculative
        inserts, TRUNCATE, messages), which this one emits, so it writes at most the BEGIN and
        COMMIT lines this one writes too."""
        stripe = first_lsn >> self.bits
        return stripe == final_lsn >> self.bits and (top + stripe) % self.jobs == self.index

    def __call__(self, top: int, lsn: int) -> bool:
        if stripe_owner(top, lsn, self.jobs, self.bits) != self.index:
            return False
        self.last = lsn
        return True
