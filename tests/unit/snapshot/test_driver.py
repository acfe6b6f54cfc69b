"""How the snapshot cuts a table into copy tasks (:func:`cdclake.snapshot.driver.chunk_blocks`)."""

from __future__ import annotations

import pytest

from cdclake.snapshot.driver import chunk_blocks


def chunks(blocks: int, per: int) -> list[int]:
    """The sizes of the chunks a table of ``blocks`` gets, ``per`` blocks each (the last
    one takes the rest)."""
    starts = list(range(0, blocks, per)) or [0]
    return [min(per, blocks - s) for s in starts]


@pytest.mark.parametrize(("blocks", "per_chunk", "sizes"), [
    (3_300, 8_192, [1_650, 1_650]),  # one chunk of 26 MB: now one per core
    (9_344, 8_192, [4_672, 4_672]),  # 64 MB + 9 MB: now two equal halves
    (20_000, 8_192, [5_000] * 4),  # three chunks: two whole waves of two
    (1_500, 8_192, [1_500]),  # two chunks would be under 8 MB each: one
    (100_000, 8_192, [7_143] * 13 + [7_141]),  # thirteen: fourteen, seven whole waves
    (10, 4, [4, 4, 2]),  # tiny chunks asked for are kept: never fewer than the setting gives
    (0, 8_192, [0]),  # an empty table: one chunk
])
def test_a_table_fills_every_core_with_chunks_of_equal_size(blocks: int, per_chunk: int,
                                                            sizes: list[int]) -> None:
    per = chunk_blocks(blocks, per_chunk, cores=2, min_blocks=1_024)
    assert per <= max(per_chunk, 1)
    assert chunks(blocks, per) == sizes
    assert sum(sizes) == blocks
