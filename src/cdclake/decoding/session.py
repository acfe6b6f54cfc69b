"""One decoding run: XLogReader -> decode -> reorder buffer -> commit processing -> plugin.

The same stages run locally (`cdclake decode`) and inside Spark tasks; this module wires them
for a single process over any segment source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.decode import CatalogTracker, Decoder, DecodeStats
from cdclake.decoding.filter import Filter
from cdclake.decoding.reassembly import OutputPlugin, Replayer, Resolver
from cdclake.decoding.reorder import ReorderBuffer, clean_spill_dir
from cdclake.decoding.walclass import PgClassTracker
from cdclake.wal.reader import XLogReader
from cdclake.wal.source import SegmentSource


@dataclass
class DecodeResult:
    stats: DecodeStats
    version: int
    segment_size: int
    peak_memory: int  #: most bytes of changes the reorder buffer held at once
    spilled_txns: int
    spilled_changes: int
    spilled_bytes: int
    open_xids: list[int] = field(default_factory=list)  #: still running at the end of the WAL
    end_lsn: int = 0  #: where the next record would start


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


def decode(source: SegmentSource, dictionary: Dictionary, options: DecodeOptions,
           make_plugin: Callable[[Dictionary, int], OutputPlugin], *,
           tracker: Callable[[Dictionary], CatalogTracker] | None = PgClassTracker,
           resolver: Resolver | None = None) -> DecodeResult:
    """Decode ``source`` and feed every committed transaction to the plugin.

    ``make_plugin(dictionary, server_major_version)`` is called once the first page tells the
    version: some output formats differ between PostgreSQL versions.
    """
    reader = XLogReader(source, start_lsn=options.read_from, end_lsn=options.end_lsn)
    flt = Filter(dictionary, local_only=options.local_only, tables=options.tables)
    clean_spill_dir(options.spill_dir)
    decoder: Decoder | None = None
    buffer: ReorderBuffer | None = None
    for rec in reader:
        if decoder is None:
            replayer = Replayer(dictionary, make_plugin(dictionary, reader.version), resolver,
                                flt)
            buffer = ReorderBuffer(options.work_mem, options.spill_dir, reader.segment_size)
            decoder = Decoder(db_oid=options.db_oid, buffer=buffer, replay=replayer, filter=flt,
                              start_lsn=options.start_lsn, version=reader.version,
                              tracker=tracker(dictionary) if tracker else None)
        decoder.process(rec)
    if decoder is None or buffer is None:
        return DecodeResult(DecodeStats(), 0, 0, 0, 0, 0, 0)
    result = DecodeResult(
        stats=decoder.stats, version=reader.version, segment_size=reader.segment_size,
        peak_memory=max(buffer.peak_size, buffer.size), spilled_txns=buffer.spilled_txns,
        spilled_changes=buffer.spilled_changes, spilled_bytes=buffer.spilled_bytes,
        open_xids=sorted(x for x, t in buffer.by_txn.items() if not t.top),
        end_lsn=getattr(reader, "end_of_wal", 0) or decoder.stats.last_lsn)
    buffer.discard_all()
    return result
