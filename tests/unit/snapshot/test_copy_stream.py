"""snapshot.chunks._CopyStream: the CSV reader's thread reads no further ahead of the batches
taken than AHEAD_BLOCKS blocks, whatever the chunk's length, and every byte arrives once."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.csv as pcsv

from cdclake.snapshot import chunks
from cdclake.snapshot.chunks import AHEAD_BLOCKS, _CopyStream

ROWS = 5000


class _Copy:
    """COPY TO's data messages: one row each, then b"" (psycopg's ``Copy.read``)."""

    def __init__(self, rows: int) -> None:
        self.rows = iter([f"{i},row {i:06d}\n".encode() for i in range(rows)])

    def read(self) -> bytes:
        return next(self.rows, b"")


def test_the_reader_waits_for_the_batches_taken() -> None:
    stream = _CopyStream(_Copy(ROWS).read)
    block = 4096  # ~16 bytes a row: some 20 blocks
    ahead: list[int] = []
    original = stream.read

    def read(n: int = -1) -> bytes | bytearray:
        out = original(n)
        ahead.append(stream._handed - stream._taken)
        return out

    stream.read = read  # type: ignore[method-assign]
    reader = pcsv.open_csv(
        stream, read_options=pcsv.ReadOptions(column_names=["i", "s"], block_size=block,
                                              use_threads=False),
        convert_options=pcsv.ConvertOptions(column_types={"i": pa.int64(), "s": pa.string()}))
    got = []
    for batch in reader:
        stream.took()
        time.sleep(0.01)  # a slow conversion: the reader's thread would run ahead
        got.extend(batch.column(0).to_pylist())
    assert got == list(range(ROWS))
    assert len(ahead) > 10
    assert max(ahead) <= AHEAD_BLOCKS


def test_close_wakes_a_waiting_read_and_ends_reading(monkeypatch) -> None:
    monkeypatch.setattr(chunks, "AHEAD_WAIT_S", 60.0)
    stream = _CopyStream(_Copy(ROWS).read)
    for _ in range(AHEAD_BLOCKS):
        assert stream.read(64)
    result: list[bytes | bytearray] = []
    waiting = threading.Thread(target=lambda: result.append(stream.read(64)))
    waiting.start()
    time.sleep(0.2)
    assert waiting.is_alive()  # no batch taken: the read waits
    stream.close()
    waiting.join(5)
    assert not waiting.is_alive() and result == [b""]


def test_a_read_that_waits_too_long_reads_anyway(monkeypatch) -> None:
    monkeypatch.setattr(chunks, "AHEAD_WAIT_S", 0.05)
    stream = _CopyStream(_Copy(ROWS).read)
    blocks = [stream.read(64) for _ in range(AHEAD_BLOCKS + 2)]
    assert all(len(b) == 64 for b in blocks)


def test_blocks_longer_than_a_read_are_split_and_every_byte_arrives_once() -> None:
    data = bytes(range(256)) * 12  # the compiled reader's blocks: many rows each
    blocks = iter([data[:1000], data[1000:2500], data[2500:]])
    stream = _CopyStream(lambda: next(blocks, b""))
    got = []
    while out := stream.read(700):
        stream.took()
        got.append(bytes(out))
    assert [len(b) for b in got[:-1]] == [700] * (len(got) - 1)
    assert b"".join(got) == data
