"""The decoder's start-up: when a committing transaction can be emitted whole.

A decoder reading an archive from some segment on cannot know, from a commit record alone,
whether the transaction had changes before the first record it read. PostgreSQL's snapbuild.c
answers the same question for a slot with a state machine (START, BUILDING, FULL, CONSISTENT)
fed by running-xacts records, and persists its state so a restart need not rebuild it. This is
that machine reduced to what a decoder over an archive needs, with the same persisted shape:

- ``START``: nothing proves the transactions seen so far whole. Emitting one is refused.
- ``CONSISTENT``: the transactions that may be incomplete are known, the *suspects*: those
  running at the first running-xacts record read (they may have begun before the first WAL
  read). Emitting a suspect is refused; every other transaction began after the read started.

Two shortcuts reach ``CONSISTENT`` with no suspects at once: a WAL read that starts at a
shutdown checkpoint (nothing was running), and a new stream that starts at the full
dictionary ``cdclake source install`` wrote (the decoder cuts every change before it, and the
initial snapshot holds the effects of the transactions open across the install).

The state is carried from one batch to the next (``to_json``/``from_json``, in the stream's
``state/progress.json``): a continued decoder does not re-derive it from whatever record
starts the next batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cdclake.errors import DecodingError
from cdclake.lsn import format_lsn

START = "start"
CONSISTENT = "consistent"


@dataclass
class Startup:
    """The start-up state of one decoder; ``suspects`` is None until ``CONSISTENT``."""

    suspects: set[int] | None = None
    #: a continued decoder: its first record is not the first of the WAL read
    continued: bool = False

    @property
    def state(self) -> str:
        return START if self.suspects is None else CONSISTENT

    @classmethod
    def at_dictionary(cls) -> Startup:
        """A new stream starting at the install's full dictionary: consistent, no suspects."""
        return cls(set())

    def resume(self) -> Startup:
        """This state for a decoder that continues this one's WAL (a copy: they diverge)."""
        return Startup(None if self.suspects is None else set(self.suspects), continued=True)

    def first_record(self, shutdown_checkpoint: bool) -> None:
        """The first record of the WAL read is a checkpoint; a shutdown one proves a clean
        start. Called by the decoder for XLOG records while it has read only one record."""
        if not self.continued and shutdown_checkpoint and self.suspects is None:
            self.suspects = set()

    def running_xacts(self, xids: Iterable[int]) -> None:
        """A running-xacts record: the first one read names the suspects."""
        if self.suspects is None:
            self.suspects = set(xids)

    def check(self, xid: int, subxids: tuple[int, ...], lsn: int) -> None:
        """Refuse to emit a transaction that may have changes before the first WAL read."""
        suspects = self.suspects
        if suspects is None:
            raise DecodingError(
                f"transaction {xid} commits at {format_lsn(lsn)} but no running-xacts record "
                "was read before it, so it may have changes before the first WAL read; "
                "decode from an earlier segment (one before the start LSN's checkpoint)")
        if suspects and (xid in suspects or any(s in suspects for s in subxids)):
            raise DecodingError(
                f"transaction {xid} commits at {format_lsn(lsn)} but was already running at "
                "the first running-xacts record read, so some of its changes may precede the "
                "first WAL read; decode from an earlier segment")

    # -- carried between batches -------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state,
                "suspects": None if self.suspects is None else sorted(self.suspects)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Startup:
        """A continued decoder's start-up. Also reads the shape earlier versions saved
        (``clean_start``, ``maybe_incomplete``): a clean start had no suspects."""
        if "state" in d:
            suspects = d.get("suspects")
        else:
            suspects = d.get("maybe_incomplete")
            if suspects is None and d.get("clean_start"):
                suspects = []
        return cls(None if suspects is None else {int(x) for x in suspects}, continued=True)
