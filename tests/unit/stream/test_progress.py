"""Progress is committed with a compare-and-swap: of two runs that decoded the same batch
from the same progress, the second is refused and the first one's progress stands."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.decoding.startup import Startup
from cdclake.errors import ConcurrentRunError, StoreError
from cdclake.stream.progress import KEEP, Progress, load_progress, save_progress


def progress(seq: int, next_lsn: int = 0x1000) -> Progress:
    return Progress(seq=seq, batch=f"{seq:06d}-x", next_lsn=next_lsn,
                    last_segment="000000010000000000000000", timeline=1, last_lsn=next_lsn - 8,
                    confirmed_lsn=0, restart_lsn=next_lsn, start_lsn=0, db_oid=5, version=15,
                    segment_size=16 << 20, dictionary_key="d", startup=Startup(set()))


def test_the_second_commit_of_a_batch_is_refused(tmp_path: Path) -> None:
    store, layout = LocalStore(tmp_path), Layout()
    assert load_progress(store, layout) is None
    save_progress(store, layout, progress(1, 0x1000))
    with pytest.raises(ConcurrentRunError, match=r"another run committed batch 000001-x "
                                                 r"\(number 1\) of .*state/progress/ first"):
        save_progress(store, layout, progress(1, 0x2000))
    assert load_progress(store, layout).next_lsn == 0x1000  # type: ignore[union-attr]
    save_progress(store, layout, progress(2, 0x3000))
    got = load_progress(store, layout)
    assert got is not None and (got.seq, got.next_lsn) == (2, 0x3000)
    # progress.json repeats the newest, for people and cdclake status
    assert json.loads(store.get(layout.progress_key()))["seq"] == 2


def test_the_log_is_the_truth_and_keeps_only_the_recent_entries(tmp_path: Path) -> None:
    store, layout = LocalStore(tmp_path), Layout()
    for seq in range(1, KEEP + 8):
        save_progress(store, layout, progress(seq))
    kept = [o.key for o in store.list(layout.progress_log_prefix())]
    assert kept[-1] == layout.progress_log_key(KEEP + 7)
    assert len(kept) <= KEEP + 1
    # a crash between the log entry and progress.json: the log entry counts
    store.put(layout.progress_log_key(KEEP + 8), json.dumps(
        progress(KEEP + 8).to_json()).encode(), if_absent=True)
    assert load_progress(store, layout).seq == KEEP + 8  # type: ignore[union-attr]


def test_a_stream_saved_before_the_log_is_read_from_progress_json(tmp_path: Path) -> None:
    store, layout = LocalStore(tmp_path), Layout()
    old = dataclasses.replace(progress(7), next_lsn=0x7000)
    store.put(layout.progress_key(), json.dumps(old.to_json()).encode())
    assert load_progress(store, layout).next_lsn == 0x7000  # type: ignore[union-attr]
    save_progress(store, layout, progress(8, 0x8000))
    assert load_progress(store, layout).seq == 8  # type: ignore[union-attr]


def test_the_timeline_and_the_last_record_are_kept(tmp_path: Path) -> None:
    store, layout = LocalStore(tmp_path), Layout()
    saved = dataclasses.replace(progress(3, 0x2000), timeline=2, last_lsn=0x1FD0)
    save_progress(store, layout, saved)
    got = load_progress(store, layout)
    assert got is not None and (got.timeline, got.last_lsn) == (2, 0x1FD0)
    assert json.loads(store.get(layout.progress_key()))["format"] == 2


def test_progress_of_format_1_is_read_and_saved_as_format_2(tmp_path: Path) -> None:
    """A stream decoded before format 2 keeps working: its timeline is its last segment's,
    its last record is unknown (the next batch checks no prev-link)."""
    store, layout = LocalStore(tmp_path), Layout()
    old = progress(5).to_json()
    del old["timeline"], old["last_lsn"]
    old.update(format=1, last_segment="000000030000000000000007")
    store.put(layout.progress_log_key(5), json.dumps(old).encode())
    got = load_progress(store, layout)
    assert got is not None and (got.seq, got.timeline, got.last_lsn) == (5, 3, None)
    save_progress(store, layout, dataclasses.replace(got, seq=6))
    assert json.loads(store.get(layout.progress_log_key(6)))["format"] == 2
    # a format this cdclake does not know is refused, not guessed at
    store.put(layout.progress_log_key(7), json.dumps({**old, "format": 3}).encode())
    with pytest.raises(StoreError, match="has format 3; this cdclake reads formats 1, 2"):
        load_progress(store, layout)


def test_a_batch_whose_log_entry_was_deleted_cannot_be_committed_again(tmp_path: Path) -> None:
    """A run that read the progress long ago (it stalled) decodes batch 1 when the log no
    longer holds entry 1: creating it again succeeds, but it is not the newest, so the run
    has not committed — and nothing of the stream's progress changed."""
    store, layout = LocalStore(tmp_path), Layout()
    for seq in range(1, KEEP + 8):
        save_progress(store, layout, progress(seq, 0x1000 * seq))
    assert not store.exists(layout.progress_log_key(1))
    before = store.get(layout.progress_key())
    with pytest.raises(ConcurrentRunError, match=r"another run committed batch 000001-x"):
        save_progress(store, layout, progress(1, 0x9000))
    assert not store.exists(layout.progress_log_key(1))
    assert store.get(layout.progress_key()) == before
    assert load_progress(store, layout).seq == KEEP + 7  # type: ignore[union-attr]
