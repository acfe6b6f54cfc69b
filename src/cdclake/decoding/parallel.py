"""A decode over several processes: every worker reads the WAL, each emits a share.

The Spark job splits the work by shuffling records by top-level xid, which costs moving every
record between processes, and leaves a large transaction to one partition. Here each of
``jobs`` worker processes reads the whole WAL itself and decodes it with the same decoding
context, and the changes of every transaction are dealt out by where they are in the WAL:
stripes of 256 KiB, worker ``(top-level xid + stripe) % jobs`` emitting the changes of a
stripe (:class:`~cdclake.decoding.stripes.Shares`). A small transaction lies in one stripe, so
small transactions spread over the workers by xid; a large one is split among all of them. A
worker does not parse or buffer the rows of the others' stripes, but follows every catalog
event, commit and abort, so all keep the same dictionary; everything else a transaction holds
(speculative inserts, TOAST chunks, TRUNCATE, messages) every worker buffers, and one emits
(:class:`~cdclake.decoding.decode.Decoder`, ``share``). Worker 0 also emits the
non-transactional messages. Reading is repeated in every worker: the split pays where parsing
and formatting the changes dominate (bench/decode.py measures it).

Each worker streams its output lines through a pipe in frames keyed by where they belong in
the WAL: a transaction's lines by its commit record's LSN, then its BEGIN line, its changes
by stripe, its COMMIT line; a non-transactional message's by its end LSN (ranked before a
commit record starting there, which follows it). Every worker's frames come in key order, so
the parent merges them into exactly the order of one process, writing a transaction's BEGIN
and COMMIT lines once (each worker that wrote a change of it wrote them too), holding one
frame per worker: the output of ``jobs`` workers equals ``jobs=1``'s, byte for byte, in
bounded memory. A transaction whose records all lie in one stripe of the worker's (most of
a workload of small transactions) goes out whole, ranked first at its commit LSN: no other
worker writes more of it than its BEGIN and COMMIT lines (:meth:`Shares.alone`), which the
parent drops.

Workers are forked, so the plugin factory may be a closure. An error
in a worker reaches the parent as the same error (its class and message), and the other
workers are stopped.
"""

from __future__ import annotations

import dataclasses
import fcntl
import heapq
import multiprocessing
import os
import pickle
import signal
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from cdclake import native
from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.context import DecodeOptions
from cdclake.decoding.reassembly import OutputPlugin
from cdclake.decoding.session import DecodeResult, decode
from cdclake.decoding.stripes import STRIPE_BITS, Shares, shares_of
from cdclake.errors import CdclakeError, DecodingError
from cdclake.wal.source import SegmentSource

#: ``make_plugin(dictionary, server_major_version, write)``: a plugin writing lines to ``write``
LinePlugin = Callable[[Dictionary, int, Callable[[str], None]], OutputPlugin]

_HEAD = struct.Struct("<BQBQI")  # frame kind, key LSN, key rank, key part, body length
_DATA, _BEGIN_LINE, _END, _ERROR = 0, 1, 2, 3
#: key ranks at one LSN: a message ending at L precedes a transaction committing at L; a
#: transaction's lines: all of them, from the one worker that writes any (``_ALONE``), or
#: those of ``begin`` (a BEGIN written first), its changes (by stripe, a BEGIN written before
#: the first of them among them), its COMMIT line
_MESSAGE, _ALONE, _BEGIN, _CHANGES, _COMMIT = 0, 1, 2, 3, 4
_FRAME_BYTES = 64 * 1024
#: the pipe buffer a worker gets, if the system allows it
_PIPE_BYTES = 1 << 20
#: how long a stopped worker has to exit before it is killed
_STOP_SECONDS = 5


def peak_rss_kb() -> int:
    """This process's own high-water RSS (VmHWM): unlike ru_maxrss it does not include the
    parent's pages from before exec or fork, so a small decode started by a big parent
    reads small."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _widen(fd: int) -> None:
    """Give a worker's pipe the largest buffer allowed: the parent merges the workers'
    frames in key order, so a worker ahead of the others waits once its pipe is full."""
    try:
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, min(limit, _PIPE_BYTES))
    except (OSError, ValueError):
        pass  # a pipe keeps its default size


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


class LineWriter:
    """Lines as the server's text: UTF-8, undecodable bytes restored, one ``\\n`` each;
    gathered and written :data:`LINES_AT_ONCE` at a time (and by :meth:`flush`): encoding and
    writing each line on its own took 7 % of a decode of pgbench's WAL."""

    __slots__ = ("lines", "out")

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= LINES_AT_ONCE:
            self.flush()

    def flush(self) -> None:
        """Write the lines gathered so far."""
        if self.lines:
            self.lines.append("")
            self.out.write("\n".join(self.lines).encode("utf-8", "surrogateescape"))
            self.lines = []


#: lines a :class:`LineWriter` gathers before it writes them
LINES_AT_ONCE = 512


def decode_lines(source: SegmentSource, dictionary: Dictionary, options: DecodeOptions,
                 make_plugin: LinePlugin, out: BinaryIO, *, jobs: int,
                 stripe_bits: int = STRIPE_BITS) -> DecodeResult:
    """Decode ``source`` with ``jobs`` processes, writing the plugin's lines to ``out``;
    the workers share out stripes of ``2**stripe_bits`` bytes of WAL."""
    if jobs < 1:
        raise DecodingError(f"jobs must be at least 1, not {jobs}")
    if jobs == 1:
        lines = LineWriter(out)
        try:
            return decode(source, dictionary, options, lambda d, v: make_plugin(d, v, lines))
        finally:  # the lines of the transactions before an error are the server's too
            lines.flush()
    # a forked worker must not inherit unwritten output: it would write it too
    sys.stdout.flush()
    out.flush()
    ctx = multiprocessing.get_context("fork")
    workers = []
    try:
        for index in range(jobs):
            rfd, wfd = os.pipe()
            _widen(wfd)
            proc = ctx.Process(
                target=_worker, name=f"cdclake-decode-{index}", daemon=True,
                args=(index, jobs, stripe_bits, wfd, source, dictionary, options, make_plugin))
            proc.start()
            os.close(wfd)
            workers.append((proc, os.fdopen(rfd, "rb", buffering=_FRAME_BYTES)))
        results: dict[int, DecodeResult] = {}
        streams = [_frames(index, pipe, proc, results) for index, (proc, pipe) in
                   enumerate(workers)]
        begun = committed = -1  # the last transaction whose BEGIN, COMMIT line was written
        alone = alone_worker = -1  # the last transaction one worker wrote whole, and which
        for (lsn, rank, _part), index, kind, body in heapq.merge(
                *streams, key=lambda frame: frame[0]):
            if rank == _ALONE:
                alone, alone_worker = lsn, index
            elif lsn == alone and index != alone_worker:
                continue  # the BEGIN or COMMIT line another worker wrote too
            elif kind == _BEGIN_LINE:
                if lsn == begun:
                    continue
                begun = lsn
            elif rank == _COMMIT:
                if lsn == committed:
                    continue
                committed = lsn
            out.write(body)
        return _combine([results[i] for i in range(jobs)])
    finally:
        # a worker still writing stops at its closed pipe; one that does not is killed
        for proc, pipe in workers:
            pipe.close()
            if proc.is_alive():
                proc.terminate()
        for proc, _pipe in workers:
            proc.join(_STOP_SECONDS)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _frames(index: int, pipe: BinaryIO, proc: Any, results: dict[int, DecodeResult],
            ) -> Iterator[tuple[tuple[int, int, int], int, int, bytes]]:
    """One worker's data frames as ``(key, index, kind, bytes)``; its result goes to
    ``results``."""
    while True:
        head = pipe.read(_HEAD.size)
        if len(head) < _HEAD.size:
            proc.join()
            raise DecodingError(f"decode worker {index} of the parallel decode ended without "
                                f"finishing (exit code {proc.exitcode})")
        kind, lsn, rank, part, n = _HEAD.unpack(head)
        body = pipe.read(n)
        if kind in (_DATA, _BEGIN_LINE):
            yield (lsn, rank, part), index, kind, body
        elif kind == _END:
            worker, result = pickle.loads(body)
            results[worker] = result
            return
        else:
            cls, message = pickle.loads(body)
            err = cls.__new__(cls)
            Exception.__init__(err, message)
            raise err


class _Framer:
    """A worker's side of the pipe: lines buffered per output unit, sent as keyed frames."""

    def __init__(self, pipe: BinaryIO, shares: Shares) -> None:
        self.pipe = pipe
        self.shares = shares
        self.key = (0, _CHANGES, 0)
        self.txn_lsn = 0  #: the commit LSN of the transaction being replayed
        self.rank = _CHANGES  #: what the plugin writes now
        self.buf: list[bytes] = []
        self.size = 0

    def unit(self, lsn: int, rank: int) -> None:
        self.flush()
        self.key = (lsn, rank, 0)
        self.rank = rank

    def write_begin(self, line: str) -> None:
        """A transaction's BEGIN line: a frame of its own, which the parent writes once, where
        it was written: in ``begin``, or before a change (among the changes of its stripe);
        in the lines of a transaction this worker writes alone, a line like the others."""
        if self.rank == _ALONE:
            self.write(line)
            return
        if self.rank == _CHANGES:
            self.flush()
            key = (self.txn_lsn, _CHANGES, self.shares.stripe())
        else:
            key = self.key
        self.send(_BEGIN_LINE, line.encode("utf-8", "surrogateescape") + b"\n", *key)

    def write(self, line: str) -> None:
        """A line of the plugin's, into the frame of its unit: :func:`write`."""
        write(self, line)

    def flush(self) -> None:
        if self.buf:
            self.buf.append(b"")
            self.send(_DATA, b"\n".join(self.buf), *self.key)
            self.buf = []
            self.size = 0

    def send(self, kind: int, body: bytes, lsn: int = 0, rank: int = 0, part: int = 0) -> None:
        self.pipe.write(_HEAD.pack(kind, lsn, rank, part, len(body)))
        self.pipe.write(body)


class _Keyed:
    """The plugin, with its output units keyed for the merge. The plugin writes its BEGIN
    lines through its ``write_begin``, set here (see ``TestDecoding.write_begin``)."""

    def __init__(self, plugin: OutputPlugin, framer: _Framer) -> None:
        if not hasattr(plugin, "write_begin"):
            raise DecodingError(f"{type(plugin).__name__} cannot run in a parallel decode: it "
                                "does not write its BEGIN lines apart (write_begin)")
        plugin.write_begin = framer.write_begin
        self.plugin = plugin
        self.framer = framer
        self.change = plugin.change
        self.truncate = plugin.truncate
        self.rewrite = plugin.rewrite

    def begin(self, txn: TxnInfo) -> None:
        """A transaction no other worker writes a line of goes out in frames of its own, in
        one unit (most of a workload of small transactions: 1 frame instead of 3)."""
        framer = self.framer
        framer.txn_lsn = txn.final_lsn
        if framer.shares.alone(txn.xid, txn.first_lsn, txn.final_lsn):
            framer.unit(txn.final_lsn, _ALONE)
            self.plugin.begin(txn)
            return
        framer.unit(txn.final_lsn, _BEGIN)
        self.plugin.begin(txn)
        framer.unit(txn.final_lsn, _CHANGES)

    def commit(self, txn: TxnInfo) -> None:
        framer = self.framer
        if framer.rank != _ALONE:
            framer.unit(txn.final_lsn, _COMMIT)
        self.plugin.commit(txn)
        framer.unit(txn.final_lsn, _CHANGES)

    def message(self, txn: TxnInfo | None, lsn: int, transactional: bool, prefix: str,
                content: bytes) -> None:
        if txn is None:
            self.framer.unit(lsn, _MESSAGE)
        self.plugin.message(txn, lsn, transactional, prefix, content)
        if txn is None:
            self.framer.unit(lsn, _CHANGES)


def _worker(index: int, jobs: int, stripe_bits: int, wfd: int, source: SegmentSource,
            dictionary: Dictionary, options: DecodeOptions, make_plugin: LinePlugin) -> None:
    # a fork inherits the parent's signal handlers (Airflow's task runner catches SIGTERM):
    # the parent's terminate must end a worker
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # its own spill directory: a decoding context clears stale spill files from its own
    own = dataclasses.replace(options, spill_dir=options.spill_dir / f"job-{index}")
    shares = shares_of(index, jobs, stripe_bits)
    with os.fdopen(wfd, "wb", buffering=_FRAME_BYTES) as pipe:
        framer = _Framer(pipe, shares)

        def plugin(d: Dictionary, v: int) -> OutputPlugin:
            return _Keyed(make_plugin(d, v, framer.write), framer)  # type: ignore[return-value]

        try:
            result = decode(source, dictionary, own, plugin, share=shares,
                            messages=index == 0)
            result.worker_peak_rss_kb = peak_rss_kb()
            framer.send(_END, pickle.dumps((index, result)))
        except CdclakeError as exc:
            framer.send(_ERROR, pickle.dumps((type(exc), str(exc))))
        except Exception as exc:  # reported to the parent, which exits 2
            framer.send(_ERROR, pickle.dumps(
                (DecodingError, f"decode worker {index} failed: {type(exc).__name__}: {exc}")))


def _combine(results: list[DecodeResult]) -> DecodeResult:
    """One result for the whole WAL: what every worker saw once (records, commits, aborts)
    from the first; what each did for its own share summed; a transaction several spilled,
    once."""
    first = results[0]
    spilled = set().union(*(r.spilled_xids for r in results))
    owned = ("changes", "emitted", "skipped_before_start", "cut_before_start")
    stats = dataclasses.replace(first.stats, **{
        name: sum(getattr(r.stats, name) for r in results) for name in owned})
    return DecodeResult(
        stats=stats, version=first.version, segment_size=first.segment_size,
        peak_memory=sum(r.peak_memory for r in results),
        spilled_txns=len(spilled), spilled_xids=spilled,
        spilled_changes=sum(r.spilled_changes for r in results),
        spilled_bytes=sum(r.spilled_bytes for r in results),
        open_xids=sorted({x for r in results for x in r.open_xids}),
        end_lsn=first.end_lsn,
        worker_peak_rss_kb=max(r.worker_peak_rss_kb for r in results))


def write(framer: _Framer, line: str) -> None:
    """``_Framer.write``: every line a worker writes passes through it. A change's line goes
    with the lines of the stripe its ``Shares`` said yes to last; a frame is sent once some
    64 KiB are buffered. Compiled as C (this file is built as itself, ``_parallel``)."""
    b = line.encode("utf-8", "surrogateescape")
    if framer.rank == _CHANGES:
        key = (framer.txn_lsn, _CHANGES, framer.shares.stripe())
        if key != framer.key:
            framer.flush()
            framer.key = key
    buf = framer.buf
    buf.append(b)
    size = framer.size + len(b) + 1
    framer.size = size
    if size >= _FRAME_BYTES:
        framer.flush()


_Framer.write = native.twin(_Framer.write, "cdclake.decoding._parallel")  # type: ignore[method-assign]
