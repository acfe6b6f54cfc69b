"""Commit processing (decoding/reassembly.py) on the committed fixture: an external TOAST
value is put back together from its chunks, an UPDATE that left it alone says so, and
INSERT ... ON CONFLICT's speculative insertions come out as the rows PostgreSQL kept."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.unit.decoding.fixture import DecodingFixture

#: what the fixture's TOAST workload stored: string_agg(md5(i::text), '') for i in 1..100
BIG = "".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(1, 101))


def test_an_external_toast_value_is_reassembled(decfix: DecodingFixture,
                                                tmp_path: Path) -> None:
    lines, _result, _d = decfix.decode(tmp_path / "spill", work_mem=1)  # chunks spill too
    tx = [line for line in lines if line.startswith("table public.tx:")]
    assert tx == [
        f"table public.tx: INSERT: id[integer]:1 n[integer]:0 big[text]:'{BIG}'",
        "table public.tx: UPDATE: id[integer]:1 n[integer]:1 big[text]:unchanged-toast-datum",
        f"table public.tx: UPDATE: id[integer]:1 n[integer]:1 big[text]:'{BIG}x'",
        "table public.tx: DELETE: id[integer]:1",
    ]


def test_speculative_insertions_become_the_rows_kept(decfix: DecodingFixture,
                                                     tmp_path: Path) -> None:
    lines, _result, _d = decfix.decode(tmp_path / "spill")
    oc = [line.split(": ", 2)[1] for line in lines if line.startswith("table public.oc:")]
    # DO NOTHING on a conflict writes nothing; each DO UPDATE is an UPDATE; the new keys of
    # the bulk upsert are inserts (every speculative insertion confirmed or aborted)
    assert oc.count("INSERT") == 5 and oc.count("UPDATE") == 5
    assert oc == [line.split(": ", 2)[1] for line in decfix.lines
                  if line.startswith("table public.oc:")]
