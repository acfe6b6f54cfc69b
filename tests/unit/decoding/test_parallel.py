"""``cdclake decode --jobs N``: N worker processes, each emitting its share of the changes,
merged back into exactly the output of one process (no server needed)."""

from __future__ import annotations

import io
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.parallel import (
    _ALONE,
    _BEGIN,
    _BEGIN_LINE,
    _COMMIT,
    _DATA,
    _HEAD,
    STRIPE_BITS,
    _Framer,
    _Keyed,
    decode_lines,
)
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.reassembly import OutputPlugin
from cdclake.decoding.session import DecodeResult
from cdclake.decoding.stripes import Shares, shares_of
from cdclake.errors import CdclakeError, DecodingError
from cdclake.lsn import segment_name
from cdclake.wal.source import DirectorySource
from tests.unit.decoding.fixture import DecodingFixture


def plugin(d: Dictionary, version: int, write: Callable[[str], None]) -> OutputPlugin:
    return TestDecoding(write, d.types, version=version)  # type: ignore[return-value]


def run(fx: DecodingFixture, wal: Path, jobs: int, spill: Path,
        make_plugin: Callable[..., OutputPlugin] = plugin, stripe_bits: int = STRIPE_BITS,
        **kw: object) -> tuple[bytes, DecodeResult]:
    out = io.BytesIO()
    result = decode_lines(DirectorySource([wal]), Dictionary(), fx.options(spill, **kw),
                          make_plugin, out, jobs=jobs, stripe_bits=stripe_bits)
    return out.getvalue(), result


def slot_text(fx: DecodingFixture) -> bytes:
    return "".join(f"{line}\n" for line in fx.lines).encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("jobs", [2, 3])
@pytest.mark.parametrize("stripe_bits", [STRIPE_BITS, 9])
def test_any_number_of_jobs_writes_what_one_process_writes(decfix: DecodingFixture,
                                                          tmp_path: Path, jobs: int,
                                                          stripe_bits: int) -> None:
    """With 256 KiB stripes (each small transaction in one worker) and with 512-byte ones
    (every transaction split among the workers, change by change)."""
    one, r1 = run(decfix, decfix.dir, 1, tmp_path / "one")
    many, rn = run(decfix, decfix.dir, jobs, tmp_path / "many", stripe_bits=stripe_bits)
    assert one == slot_text(decfix)
    assert many == one
    # what each worker did for its own share adds up to what one process did
    for name in ("records", "changes", "committed", "emitted", "aborted",
                 "skipped_before_start", "last_lsn"):
        assert getattr(rn.stats, name) == getattr(r1.stats, name), name
    assert rn.open_xids == r1.open_xids
    assert rn.worker_peak_rss_kb > 0 and r1.worker_peak_rss_kb == 0


@pytest.mark.parametrize("stripe_bits", [STRIPE_BITS, 9])
def test_begin_and_commit_lines_every_worker_writes_come_out_once(decfix: DecodingFixture,
                                                                 tmp_path: Path,
                                                                 stripe_bits: int) -> None:
    """Without skip-empty-xacts, every worker that replays a transaction writes its BEGIN and
    COMMIT lines, also a worker that emits none of its changes (it holds the TOAST chunks,
    speculative inserts, TRUNCATE and messages every worker buffers); the merge keeps them
    once, also where the transaction's own worker wrote it whole in one frame."""
    def eager(d: Dictionary, version: int, write: Callable[[str], None]) -> OutputPlugin:
        return TestDecoding(write, d.types, version=version,  # type: ignore[return-value]
                            skip_empty_xacts=False)

    one, _ = run(decfix, decfix.dir, 1, tmp_path / "one", make_plugin=eager)
    many, _ = run(decfix, decfix.dir, 2, tmp_path / "many", make_plugin=eager,
                  stripe_bits=stripe_bits)
    assert many == one
    assert one.count(b"\nBEGIN ") > slot_text(decfix).count(b"\nBEGIN ")  # empty ones too


def _frames(pipe: io.BytesIO) -> list[tuple[int, tuple[int, int, int], bytes]]:
    data, at, frames = pipe.getvalue(), 0, []
    while at < len(data):
        kind, lsn, rank, part, n = _HEAD.unpack_from(data, at)
        at += _HEAD.size
        frames.append((kind, (lsn, rank, part), data[at:at + n]))
        at += n
    return frames


@pytest.mark.parametrize("xid", [4, 5])
def test_a_transaction_only_its_worker_writes_goes_out_in_one_frame(xid: int) -> None:
    """Worker 0 of 2, a transaction whose records lie in stripe 0 (the first 256 KiB): with
    an even xid the stripe is worker 0's, so no other worker writes a line of it, and its
    lines go out in one frame; with an odd one, worker 0 writes only what every worker
    replaying it writes (here its BEGIN and COMMIT), keyed apart for the merge to keep once."""
    pipe = io.BytesIO()
    framer = _Framer(pipe, Shares(0, 2))  # type: ignore[arg-type]
    keyed = _Keyed(TestDecoding(framer.write, {}, version=15, skip_empty_xacts=False),
                   framer)  # type: ignore[arg-type]
    info = TxnInfo(xid=xid, first_lsn=100, final_lsn=200, end_lsn=232, commit_time=0)
    keyed.begin(info)
    if xid == 4:
        framer.write("table public.t: INSERT: id[integer]:1")
    keyed.commit(info)
    framer.flush()
    if xid == 4:
        assert _frames(pipe) == [(_DATA, (200, _ALONE, 0), b"BEGIN 4\ntable public.t: INSERT: "
                                  b"id[integer]:1\nCOMMIT 4\n")]
    else:
        assert _frames(pipe) == [(_BEGIN_LINE, (200, _BEGIN, 0), b"BEGIN 5\n"),
                                 (_DATA, (200, _COMMIT, 0), b"COMMIT 5\n")]
    for make in (Shares, shares_of):  # the Python class, and the compiled one where built
        assert make(0, 2).alone(4, 100, 200) and not make(1, 2).alone(4, 100, 200)
        assert not make(0, 2).alone(4, 100, 1 << STRIPE_BITS)  # two stripes: two workers


def test_every_worker_spills_and_cleans_up(decfix: DecodingFixture, tmp_path: Path) -> None:
    spill = tmp_path / "spill"
    out, result = run(decfix, decfix.dir, 2, spill, work_mem=1)
    assert out == slot_text(decfix)
    assert result.spilled_changes >= result.stats.changes // 2
    assert sorted(p.name for p in spill.iterdir()) == ["job-0", "job-1"]
    assert not list(spill.rglob("*.spill"))


def test_corrupt_wal_is_the_same_error_with_any_number_of_jobs(decfix: DecodingFixture,
                                                               tmp_path: Path) -> None:
    wal = tmp_path / "corrupt"
    shutil.copytree(decfix.dir, wal)
    # the magic of the third page after the one decoding starts on (pages before it are not
    # read)
    target = (decfix.read_from // 8192 + 3) * 8192
    size = len(sorted(wal.iterdir())[0].read_bytes())
    first = wal / segment_name(1, target // size, size)
    data = bytearray(first.read_bytes())
    data[target % size] ^= 0xFF
    first.write_bytes(bytes(data))
    errors = []
    for jobs in (1, 2):
        with pytest.raises(CdclakeError) as exc:
            run(decfix, wal, jobs, tmp_path / f"spill{jobs}")
        errors.append((type(exc.value), str(exc.value)))
    assert errors[0] == errors[1]
    assert first.name in errors[0][1]


def test_a_killed_worker_stops_the_decode_with_one_clear_error(decfix: DecodingFixture,
                                                               tmp_path: Path) -> None:
    """Worker 1 really dies, SIGKILL at its first line: the parent says which worker and
    how, stops the other, and returns no result."""
    def killing(d: Dictionary, version: int, write: Callable[[str], None]) -> OutputPlugin:
        def write_or_die(line: str) -> None:
            if multiprocessing.current_process().name == "cdclake-decode-1":
                os.kill(os.getpid(), signal.SIGKILL)
            write(line)
        return plugin(d, version, write_or_die)

    with pytest.raises(DecodingError, match=r"decode worker 1 of the parallel decode ended "
                                            r"without finishing \(exit code -9\)"):
        run(decfix, decfix.dir, 2, tmp_path / "spill", make_plugin=killing)


def test_workers_stop_even_where_the_parent_catches_sigterm(decfix: DecodingFixture,
                                                           tmp_path: Path) -> None:
    """Airflow's task runner catches SIGTERM, and a forked worker inherits the handler. Worker
    1 fails while worker 0 is blocked writing more than its pipe holds: the decode must stop
    with worker 1's error instead of waiting for worker 0 forever."""
    def flooding(d: Dictionary, version: int, write: Callable[[str], None]) -> OutputPlugin:
        def write_or_fail(line: str) -> None:
            if multiprocessing.current_process().name == "cdclake-decode-1":
                raise DecodingError("worker 1 gives up")
            for _ in range(1000):  # far more than a pipe holds
                write(line)
        return plugin(d, version, write_or_fail)

    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    try:
        started = time.monotonic()
        with pytest.raises(DecodingError, match="worker 1 gives up"):
            run(decfix, decfix.dir, 2, tmp_path / "spill", make_plugin=flooding)
        assert time.monotonic() - started < 60
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_worker_pipes_get_the_largest_buffer_the_system_allows() -> None:
    """The parent merges the workers' frames in key order, so a worker that runs ahead waits
    on a full pipe: its pipe gets the system's largest buffer (up to 1 MiB), not 64 KiB."""
    import fcntl

    from cdclake.decoding.parallel import _PIPE_BYTES, _widen

    limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    rfd, wfd = os.pipe()
    try:
        before = fcntl.fcntl(wfd, fcntl.F_GETPIPE_SZ)
        _widen(wfd)
        assert fcntl.fcntl(wfd, fcntl.F_GETPIPE_SZ) == max(before, min(limit, _PIPE_BYTES))
        assert min(limit, _PIPE_BYTES) > before
    finally:
        os.close(rfd)
        os.close(wfd)
