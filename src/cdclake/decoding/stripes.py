"""How the workers of a parallel decode share out the changes: by stripes of WAL.

Worker ``index`` of ``jobs`` emits the changes in the stripes where ``(top-level xid +
stripe) % jobs == index``, a stripe being ``2**bits`` bytes of WAL (:mod:`cdclake.decoding.parallel`
explains why). The decoder asks before it parses a change, the replayer before it emits one
(``Decoder.share``, ``Replayer.share``: :func:`says_yes`).

This file is compiled as itself too, as ``cdclake.decoding._stripes`` (Cython's pure-Python
mode; ``_stripes.pxd`` adds the C types): there :class:`Shares` is an extension type whose
fields are C integers, and the compiled decoder and replayer call :func:`says_yes`, and through
it :meth:`Shares.says`, as C once per change — where Python's integer arithmetic and attribute
lookups cost more than the rest of the question. The workers make theirs with
:func:`shares_of`, bound to its compiled twin (:func:`cdclake.native.twin`): the compiled
class's.
"""

from __future__ import annotations

from collections.abc import Callable

from cdclake import native

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
        return (first_lsn >> self.bits == final_lsn >> self.bits
                and stripe_owner(top, first_lsn, self.jobs, self.bits) == self.index)

    def says(self, top: int, lsn: int) -> bool:
        """Whether the change at ``lsn`` of top-level transaction ``top`` is this worker's
        (then it is the one said yes to last)."""
        if stripe_owner(top, lsn, self.jobs, self.bits) != self.index:
            return False
        self.last = lsn
        return True

    def __call__(self, top: int, lsn: int) -> bool:
        return self.says(top, lsn)


def says_yes(share: Callable[[int, int], bool], top: int, lsn: int) -> bool:
    """``share(top, lsn)``; of a :class:`Shares`, its :meth:`~Shares.says`, called directly
    (as C in the compiled decoder and replayer)."""
    if type(share) is Shares:
        shares = share
        return shares.says(top, lsn)
    return share(top, lsn)


def shares_of(index: int, jobs: int, bits: int = STRIPE_BITS) -> Shares:
    """Worker ``index``'s :class:`Shares`: where this file is compiled, the compiled class's
    (the one the compiled decoder and replayer ask as C)."""
    return Shares(index, jobs, bits)


shares_of = native.twin(shares_of, "cdclake.decoding._stripes")
