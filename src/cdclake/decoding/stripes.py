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

    def __call__(self, top: int, lsn: int) -> bool:
        if (top + (lsn >> self.bits)) % self.jobs != self.index:
            return False
        self.last = lsn
        return True
