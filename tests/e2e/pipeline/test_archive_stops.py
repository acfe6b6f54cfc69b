"""A stream that cannot go on says so, as a user meets it: the bank stream of the fault suite
(PostgreSQL 15, a ``file://`` store) with its segments sent one at a time by ``cdclake
wal-push``, as ``archive_command`` sends them (no archive directory, whose shipping would find
a hole first), and ``cdclake run`` and ``cdclake status`` as real processes.

- A segment missing below archived ones never comes by itself: ``cdclake run`` exits 2 with one
  line naming it, in its report too, and ``cdclake status`` names it and exits 1 — where every
  run used to print "nothing new" and exit 0.
- A stored segment with a flipped byte in a record's alignment padding (no CRC covers it, the
  WAL reads the same): ``cdclake run`` exits 2 naming the segment and both digests, and
  nothing of it is decoded or merged.

Put back, the next run goes on and every mirror, read with DuckDB, equals its source. The runs
that succeed run in this process, on one Spark session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import Layout, open_store
from cdclake.archive.manifest import Manifest
from cdclake.pipeline import steps
from cdclake.stream.progress import load_progress
from tests.e2e.pipeline.test_faults import TABLES, Stream, bank_stream
from tests.e2e.pipeline.test_snapshot_cli import cdclake, mirror_rows, ok
from tests.support.walfiles import padding_offset

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stream]:
    with bank_stream(tmp_path_factory.mktemp("stops")) as s:
        del s.env["CDCLAKE_ARCHIVE_DIR"]  # archive_command pushes every segment
        yield s


@pytest.fixture
def stream(bank: Stream, spark: Any) -> Stream:
    """The bank stream with a round of changes, everything archived pushed, decoded and
    merged."""
    bank.changes()
    push(bank, not_pushed(bank))
    steps.run_once(bank.config, spark=spark)
    bank.assert_mirrors_equal()
    return bank


def not_pushed(s: Stream) -> list[Path]:
    """The server's archived segments the store does not have yet."""
    stored = set(Manifest(open_store(s.config), Layout()).names())
    return sorted(p for p in s.pg.archive_dir.iterdir()
                  if len(p.name) == 24 and p.name not in stored)


def push(s: Stream, paths: list[Path]) -> None:
    for path in paths:
        ok(cdclake(s.env, "wal-push", str(path)))


def failing_run(s: Stream, run_id: str) -> tuple[str, dict[str, Any]]:
    """``cdclake run`` that must fail: its last line on stderr, cdclake's one-line error (the
    lines before are the steps that ran), and its report."""
    out = cdclake(s.env, "run", "--run-id", run_id)
    assert out.returncode == 2, f"cdclake run exited {out.returncode}:\n{out.stderr}"
    assert "Traceback" not in out.stderr + out.stdout
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("cdclake run: error: "), out.stderr
    report = json.loads((s.home / "reports" / "runs" / f"{run_id}.json").read_text())
    return line, report


def test_a_missing_segment_stops_the_run_and_status_says_so(stream: Stream, spark: Any) -> None:
    s = stream
    s.changes()
    s.changes()
    hole, *later = not_pushed(s)
    assert later, "the changes took one segment: no hole below an archived one"
    push(s, later)
    store = s.config.effective_store_url()
    line, report = failing_run(s, "hole")
    assert f"WAL segment {hole.name} is missing from the archive at {store}" in line
    assert f"cdclake wal-push pg_wal/{hole.name}" in line
    assert hole.name in report["steps"]["error"] and "decode" not in report["steps"]

    status = cdclake(s.env, "status")
    assert status.returncode == 1, status
    assert f"decode: STALLED: WAL segment {hole.name} is missing" in status.stdout
    assert f"GAPS: {hole.name} missing between archived segments" in status.stdout
    as_json = json.loads(cdclake(s.env, "status", "--json").stdout)
    assert as_json["decode"]["error"] == line.removeprefix("cdclake run: error: ")

    push(s, [hole])  # archived again, from the server's pg_wal or its archive
    after = steps.run_once(s.config, spark=spark)
    assert {hole.name, *(p.name for p in later)} <= set(after["steps"]["decode"]["segments"])
    s.assert_mirrors_equal()
    ok(cdclake(s.env, "status"))


def test_a_damaged_segment_is_refused_and_nothing_merged(stream: Stream, spark: Any) -> None:
    s = stream
    s.changes()
    new = not_pushed(s)
    push(s, new)
    target = new[0]
    stored = s.home / "store" / "wal" / target.name
    good = stored.read_bytes()
    assert good == target.read_bytes()
    damaged = bytearray(good)
    damaged[padding_offset(target)] ^= 0xFF
    stored.write_bytes(bytes(damaged))
    store = open_store(s.config)
    progress = load_progress(store, Layout())
    before = {t: mirror_rows(s.config, t, c) for t, c in TABLES.items()}

    line, report = failing_run(s, "damaged")
    url = store.url(Layout().wal_key(target.name))
    assert (f"{url} has sha256 {hashlib.sha256(damaged).hexdigest()}, not the "
            f"{hashlib.sha256(good).hexdigest()} its manifest entry recorded when wal-push "
            "archived it") in line
    assert line.endswith(f"(segment {target.name})")
    assert report["steps"]["error"].endswith(f"(segment {target.name})")
    assert load_progress(store, Layout()) == progress, "a batch was decoded from it"
    assert {t: mirror_rows(s.config, t, c) for t, c in TABLES.items()} == before

    stored.write_bytes(good)  # a copy with the recorded sha256 put back
    after = steps.run_once(s.config, spark=spark)
    assert target.name in after["steps"]["decode"]["segments"]
    s.assert_mirrors_equal()
