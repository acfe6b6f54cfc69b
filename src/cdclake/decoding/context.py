"""The decoding context: the one way every caller builds the decoding stages.

PostgreSQL builds each logical decoding session through one function
(``CreateDecodingContext``): it wires the reorder buffer, the snapshot builder and the output
plugin's callbacks, and restores what the slot persisted. This module is that function for
cdclake. ``cdclake decode`` (:mod:`cdclake.decoding.session`) and every Spark partition
(:mod:`cdclake.spark.partition`) call :func:`create_decoding_context`; they differ only in
what they pass: the output plugin, a start-up state and open transactions carried from a
previous batch, and, for a partition, which transactions it owns.

Stages, in the order a record meets them: the decoder (:mod:`~cdclake.decoding.decode`,
through the rmgr table) with the filter's gates, the reorder buffer (spilling past
``work_mem``), commit processing (:class:`~cdclake.decoding.reassembly.Replayer`: catalog
events, TOAST reassembly, the plugin's callbacks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.carry import Get, OpenTxn, PartOf, Put, restore_open, save_open
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.decode import CatalogTracker, Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.reassembly import OutputPlugin, Replayer
from cdclake.decoding.reorder import ReorderBuffer, clean_spill_dir
from cdclake.decoding.startup import Startup
from cdclake.decoding.walclass import PgClassTracker


@dataclass
class DecodeOptions:
    db_oid: int
    start_lsn: int  #: emit transactions whose commit record is at or after this LSN
    end_lsn: int | None = None  #: stop before records starting at or after this LSN
    read_from: int | None = None  #: first LSN to read (default: the source's first segment)
    work_mem: int = 64 * 1024 * 1024
    spill_dir: Path = Path(".cdclake/spill")
    local_only: bool = False
    tables: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()  #: tables never emitted (gate 3)
    #: a new stream started at the install's full dictionary: no change recorded before this
    #: LSN is queued (:class:`~cdclake.decoding.decode.Decoder`); 0 with an explicit start LSN
    skip_before: int = 0
    #: the key that authenticates ``cdclake.ddl`` messages (:mod:`cdclake.catalog.signing`);
    #: without one, the first message stops decoding
    ddl_key: bytes | None = None


class OwnedReplay:
    """Commit processing for a decoder that emits only the transactions it owns.

    Several decoders can share one WAL, each emitting a share of the transactions (Spark
    partitions). Every one of them applies every transaction's catalog events, so they all
    keep the same dictionary; only the owner replays its changes to the plugin. A
    non-transactional message belongs to no transaction: one decoder (``messages``) emits it.
    """

    def __init__(self, replayer: Replayer, owns: Callable[[int], bool], messages: bool) -> None:
        self.replayer = replayer
        self.owns = owns
        self.messages = messages

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None:
        self.replayer.apply_catalog(events, info)

    def replay(self, info: TxnInfo, changes: object) -> None:
        if self.owns(info.xid):
            self.replayer.replay(info, changes)  # type: ignore[arg-type]

    def message(self, lsn: int, prefix: str, content: bytes) -> None:
        if self.messages:
            self.replayer.message(lsn, prefix, content)


def _everything(xid: int) -> bool:
    return True


class DecodingContext:
    """The wired stages of one decoding session; feed it records with ``process``."""

    def __init__(self, dictionary: Dictionary, buffer: ReorderBuffer, decoder: Decoder,
                 replayer: Replayer, owns: Callable[[int], bool]) -> None:
        self.dictionary = dictionary
        self.replayer = replayer
        self.buffer = buffer
        self.decoder = decoder
        self.owns = owns
        #: the decoder's entry point, bound once (it runs for every record)
        self.process = decoder.process

    @property
    def startup(self) -> Startup:
        """The start-up state to carry to a decoder that continues this one."""
        return self.decoder.startup

    def save_open(self, put: Put, part_of: PartOf | None = None) -> list[OpenTxn]:
        """Carry the transactions still open: their changes through ``put`` (owned ones only;
        this decoder's part of a split one, ``part_of``), and the bookkeeping of all, for the
        next batch's context."""
        return save_open(self.buffer, self.owns, put, part_of)

    @property
    def peak_memory(self) -> int:
        """Most bytes of changes the reorder buffer held at once."""
        return max(self.buffer.peak_size, self.buffer.size)

    def close(self) -> None:
        """Release what the reorder buffer still holds (memory and spill files)."""
        self.buffer.discard_all()


def create_decoding_context(
        options: DecodeOptions, dictionary: Dictionary, plugin: OutputPlugin, *,
        version: int, segment_size: int,
        tracker: Callable[[Dictionary], CatalogTracker] | None = PgClassTracker,
        startup: Startup | None = None,
        carried: Iterable[OpenTxn] = (), get: Get | None = None,
        owns: Callable[[int], bool] | None = None, messages: bool = True,
        share: Callable[[int, int], bool] | None = None,
        keeps: Callable[[OpenTxn], bool] | None = None) -> DecodingContext:
    """Build the stages for a WAL of PostgreSQL ``version`` with ``segment_size`` segments.

    ``startup`` and ``carried`` continue a previous batch's decoder (its start-up state and
    the transactions it left open; ``get`` fetches their spilled changes). ``owns`` limits
    emission to some transactions (the others' changes are not even buffered) and
    ``messages`` says whether this context emits the non-transactional messages and warns
    about forged ones (see :class:`OwnedReplay`); by default it emits everything; ``keeps``
    says whose carried changes it restores (by default those of the transactions it owns:
    see :func:`cdclake.decoding.carry.restore_open`). ``share``
    splits the changes of a transaction among decoders (the workers of
    :mod:`cdclake.decoding.parallel`, which all read it; Spark partitions, for the
    transactions :mod:`cdclake.spark.routing` splits; see ``Decoder.share``).
    """
    flt = Filter(dictionary, local_only=options.local_only, tables=options.tables,
                 exclude=options.exclude)
    clean_spill_dir(options.spill_dir)
    buffer = ReorderBuffer(options.work_mem, options.spill_dir, segment_size)
    replayer = Replayer(dictionary, plugin, flt, options.ddl_key, warn_forged=messages)
    replayer.share = share
    replay = (replayer if owns is None and messages
              else OwnedReplay(replayer, owns or _everything, messages))
    decoder = Decoder(db_oid=options.db_oid, buffer=buffer, replay=replay, filter=flt,
                      start_lsn=options.start_lsn, version=version,
                      tracker=tracker(dictionary) if tracker else None,
                      skip_before=options.skip_before,
                      startup=startup.resume() if startup is not None else None, owns=owns,
                      share=share)
    owner = owns or _everything
    carried = list(carried)
    if carried:
        if get is None:
            raise ValueError("open transactions carried without a way to fetch their changes")
        restore_open(buffer, carried, keeps or (lambda o: owner(o.toplevel)), get,
                     options.spill_dir)
    return DecodingContext(dictionary, buffer, decoder, replayer, owner)
