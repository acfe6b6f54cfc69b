"""One decoding run in one process: XLogReader -> decoding context -> output plugin.

The stages are built by :func:`~cdclake.decoding.context.create_decoding_context`, as in every
Spark partition; this module adds the reading: one process over any segment source, from the
first segment (or ``read_from``) to the end of the WAL (or ``end_lsn``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.collector import fewer_collections
from cdclake.decoding.context import DecodeOptions, DecodingContext, create_decoding_context
from cdclake.decoding.decode import CatalogTracker, DecodeStats
from cdclake.decoding.reassembly import OutputPlugin
from cdclake.decoding.rmgrs import decodable
from cdclake.decoding.walclass import PgClassTracker
from cdclake.wal.reader import XLogReader
from cdclake.wal.source import SegmentSource

#: DecodeOptions is the context's: `cdclake decode` and the oracle harness import it from here
__all__ = ["DecodeOptions", "DecodeResult", "decode"]


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
    #: a parallel decode's largest worker high-water RSS (kB); 0 for one process
    worker_peak_rss_kb: int = 0
    #: the transactions spilled (the workers of a parallel decode may each spill one)
    spilled_xids: set[int] = field(default_factory=set)


def decode(source: SegmentSource, dictionary: Dictionary, options: DecodeOptions,
           make_plugin: Callable[[Dictionary, int], OutputPlugin], *,
           tracker: Callable[[Dictionary], CatalogTracker] | None = PgClassTracker,
           share: Callable[[int, int], bool] | None = None,
           messages: bool = True) -> DecodeResult:
    """Decode ``source`` and feed every committed transaction to the plugin.

    ``make_plugin(dictionary, server_major_version)`` is called once the first page tells the
    version: some output formats differ between PostgreSQL versions. ``share`` and
    ``messages`` make this one of several decoders sharing the WAL
    (:mod:`cdclake.decoding.parallel`).
    """
    reader = XLogReader(source, start_lsn=options.read_from, end_lsn=options.end_lsn)
    ctx: DecodingContext | None = None
    with fewer_collections():
        for rec in decodable(reader, options.db_oid):
            if ctx is None:
                ctx = create_decoding_context(
                    options, dictionary, make_plugin(dictionary, reader.version),
                    version=reader.version, segment_size=reader.segment_size,
                    tracker=tracker, share=share, messages=messages)
                process = ctx.process
            process(rec)
    if ctx is None:
        return DecodeResult(DecodeStats(), 0, 0, 0, 0, 0, 0)
    buffer = ctx.buffer
    result = DecodeResult(
        stats=ctx.decoder.stats, version=reader.version, segment_size=reader.segment_size,
        peak_memory=ctx.peak_memory, spilled_txns=buffer.spilled_txns,
        spilled_xids=buffer.spilled_xids,
        spilled_changes=buffer.spilled_changes, spilled_bytes=buffer.spilled_bytes,
        open_xids=sorted(x for x, t in buffer.by_txn.items() if not t.top),
        end_lsn=getattr(reader, "end_of_wal", 0) or ctx.decoder.stats.last_lsn)
    ctx.close()
    return result
