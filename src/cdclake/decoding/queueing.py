"""What a decoder does with a change it decoded: whose it is, and what enters the buffer.

A decoder may share a WAL with others (:mod:`cdclake.decoding.parallel`, a Spark job's
partitions): ``owns`` says which top-level transactions it emits, ``share`` which changes it
emits and counts. These rules decide, per change, whether it is parsed at all
(:func:`foreign`), whether this decoder counts it (:func:`mine`), whether another decoder
emits it (:func:`elsewhere`, which keeps placeholders where TOAST chunks wait), and what
queueing it means (:func:`queue_change`: nothing before ``skip_before``, the statistics).

Written once for both decoders: the decoder's handlers (:mod:`cdclake.decoding.heapdecode`,
:mod:`cdclake.decoding.commit`) call these functions, the compiled ones as C. This file is
compiled as itself (Cython's pure-Python mode, ``_queueing.pxd``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cdclake.decoding.changes import ELSEWHERE, Change
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.wal.record import RelFileLocator

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding._reorder import queue, top_of, txn
    from cython.cimports.cdclake.decoding._stripes import says_yes
else:
    from cdclake.decoding.reorder import queue, top_of, txn
    from cdclake.decoding.stripes import says_yes


class Counts(Protocol):
    """The statistics a queued change counts in (``DecodeStats``)."""

    changes: int
    cut_before_start: int


class Decoder(Protocol):
    """What these rules read of a decoder (:class:`~cdclake.decoding.decode.Decoder`)."""

    rb: ReorderBuffer
    owns: Callable[[int], bool] | None
    share: Callable[[int, int], bool] | None
    skip_before: int

    @property
    def stats(self) -> Counts: ...


def foreign(decoder: Decoder, xid: int) -> bool:
    """Whether ``xid``'s top-level transaction belongs to another decoder (``owns``): its
    changes are neither parsed nor buffered here."""
    owns = decoder.owns
    if owns is None:
        return False
    return not owns(top_of(decoder.rb, xid))


def mine(decoder: Decoder, xid: int, lsn: int) -> bool:
    """Whether this decoder counts the change ``xid`` logged at ``lsn`` in its statistics: of
    a parallel decode, where every worker queues some kinds of change, the one whose share it
    is."""
    share = decoder.share
    if share is None:
        return True
    return says_yes(share, top_of(decoder.rb, xid), lsn)


def elsewhere(decoder: Decoder, xid: int, lsn: int, origin: int, loc: RelFileLocator,
              count: int = 1, last_clears: bool = True) -> bool:
    """Whether another decoder emits the ``count`` rows of the record ``xid`` logged at
    ``lsn`` (``share``); if so, the transaction is entered, and placeholders (ELSEWHERE) are
    queued while it has TOAST chunks, so reassembly releases them where the rows would
    have."""
    if mine(decoder, xid, lsn):
        return False
    if lsn < decoder.skip_before or count == 0:
        return True  # nothing queued: not even the transaction is entered, as by its owner
    rb = decoder.rb
    t = txn(rb, xid, lsn) if type(rb) is ReorderBuffer else rb.txn(xid, lsn)
    if t.toast_pending:
        for i in range(count):
            buffer_change(rb, xid, Change(ELSEWHERE, lsn, i, loc, None, None,
                                          last_clears and i == count - 1, origin))
    return True


def queue_change(decoder: Decoder, xid: int, lsn: int, change: Change, known: int = -1) -> None:
    """Queue ``change``, of the record ``xid`` logged at ``lsn``, and count it if it is
    :func:`mine` (``known``: that answer where the caller has it, -1 where not); a change
    before ``skip_before`` is only counted as cut."""
    stats = decoder.stats
    if known < 0:
        known = mine(decoder, xid, lsn)
    if lsn < decoder.skip_before:
        stats.cut_before_start += known
        return
    buffer_change(decoder.rb, xid, change)
    stats.changes += known


def buffer_change(rb: ReorderBuffer, xid: int, change: Change) -> None:
    """``rb.queue(xid, change)``; for the ReorderBuffer itself, the function its method is
    (as C where compiled)."""
    if type(rb) is ReorderBuffer:
        queue(rb, xid, change)
    else:
        rb.queue(xid, change)
