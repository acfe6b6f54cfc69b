"""The Spark decode job against a single-process decode of the same WAL (PostgreSQL 15, 18)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.config import Config
from cdclake.decoding import stream
from cdclake.local.postgres import LocalPostgres
from cdclake.pipeline import steps
from cdclake.spark.job import decode_batch
from cdclake.spark.progress import load_progress
from cdclake.wal.lsn import format_lsn
from tests.e2e.spark.helpers import local_decode, rows, ship_to, tables_of
from tests.e2e.spark.workload import Archived, run

pytestmark = pytest.mark.e2e


def _config(tmp_path: Path, name: str, dsn: str, work_mem: int = 64 << 20) -> Config:
    home = tmp_path / name
    return Config(home=home, store_url=(home / "store").as_uri(), source_dsn=dsn,
                  spark_partitions=2, spill_dir=home / "spill", work_mem=work_mem)


def _without_batch(manifest: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in manifest.items() if k != "batch"}


@pytest.fixture
def archived(pg: LocalPostgres, database: str, tmp_path: Path) -> Archived:
    return run(pg, database, tmp_path / "wal")


def test_one_batch_equals_single_process_decode(pg: LocalPostgres, archived: Archived,
                                                tmp_path: Path, spark: Any) -> None:
    expected_manifest = local_decode(archived, tmp_path / "ref", tmp_path / "ref-spill")
    expected = tables_of(tmp_path / "ref", ["local"])
    assert {"public.acct", "public.logs", "public.nothing", "public.big"} <= set(expected)
    assert len(archived.segments) >= 4, "the workload must span several segments"

    config = _config(tmp_path, "spark", pg.dsn(archived.database))
    ship_to(config, archived)
    result = decode_batch(config, spark=spark)
    assert result is not None
    assert result.segments == archived.segments
    assert _without_batch(result.manifest) == _without_batch(expected_manifest)
    got = tables_of(Path(config.home) / "store" / "changes", [result.batch])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert got[name].schema == table.schema, name
        assert rows(got[name]) == rows(table), name
    # the large transactions (the 1 MiB fills, one after a TRUNCATE) were split by stripes
    # of WAL, each decoded on both partitions, and the rows equal all the same (one TRUNCATE
    # row); the busiest partition decoded at least its share, and not everything
    per_commit = Counter(r[stream.COMMIT_LSN] for t in expected.values() for r in rows(t))
    busiest, changes = result.stats["peak_partition_changes"], result.stats["changes"]
    assert result.stats["split_txns"] >= 2
    assert [r[stream.OP] for r in rows(got["public.logs"])].count(stream.OP_TRUNCATE) == 1
    assert busiest < changes, (per_commit.most_common(1), busiest)
    assert busiest * config.spark_partitions >= changes
    # the workload's content really is there
    ops = rows(expected["public.nothing"])
    assert [r[stream.OP] for r in ops] == ["I"] * 5 + ["U", "D"]
    assert all(r[stream.OLD_KEY] is None for r in ops)
    rewritten = [r for r in rows(expected["public.acct"]) if r.get("note") == "after rewrite"]
    assert len(rewritten) == 3  # decoded under the relfilenode VACUUM FULL gave acct
    # the ADD COLUMN committed while the long transaction was open
    assert "flag" in expected["public.big"].column_names
    big = [r for r in rows(expected["public.big"]) if r[stream.OP] == "U"]
    assert big and big[0][stream.UNCHANGED_TOAST] == ["doc"]
    # nothing new: a second run decodes nothing and leaves the progress alone
    store = open_store(config)
    before = load_progress(store, Layout())
    assert decode_batch(config, spark=spark) is None
    assert load_progress(store, Layout()) == before
    # a crash before the progress was saved: the batch is decoded again, identically
    store.delete(Layout().progress_log_key(before.seq))
    store.delete(Layout().progress_key())
    dry = decode_batch(config, spark=spark, dry_run=True)
    assert dry is not None and dry.batch == result.batch and dry.manifest == {}
    again = decode_batch(config, spark=spark)
    assert again is not None and again.batch == result.batch
    assert again.manifest == result.manifest
    assert {k: rows(v) for k, v in tables_of(Path(config.home) / "store" / "changes",
                                             [again.batch]).items()} == \
        {k: rows(v) for k, v in got.items()}


def test_batches_cut_at_segment_boundaries_equal_one_batch(pg: LocalPostgres,
                                                           archived: Archived, tmp_path: Path,
                                                           spark: Any) -> None:
    one = _config(tmp_path, "one", pg.dsn(archived.database))
    ship_to(one, archived)
    whole = decode_batch(one, spark=spark)
    assert whole is not None

    # a tiny work_mem: partitions spill locally too, on top of the carried-over spill files
    cut = _config(tmp_path, "cut", pg.dsn(archived.database), work_mem=4096)
    ship_to(cut, archived)
    store = open_store(cut)
    segs = archived.segments
    batches = []
    carried = 0
    for until in (segs[0], segs[1], segs[3], None):
        result = decode_batch(cut, spark=spark, until_segment=until)
        assert result is not None, (until, load_progress(store, Layout()))
        batches.append(result)
        progress = load_progress(store, Layout())
        assert progress is not None
        carried += sum(1 for t in progress.open_txns if t.spill)
        for t in progress.open_txns:  # the spill objects the next batch restores exist
            assert t.spill is None or store.exists(t.spill)
    assert carried, "no transaction was open across a cut: the test would prove nothing"
    assert sum(b.stats["spilled_changes"] for b in batches) > 0
    assert [s for b in batches for s in b.segments] == segs
    assert batches[0].start_lsn == whole.start_lsn and batches[-1].end_lsn == whole.end_lsn
    for a, b in itertools.pairwise(batches):
        assert a.end_lsn == b.start_lsn
    assert sum(b.commits for b in batches) == whole.commits
    root = Path(cut.home) / "store" / "changes"
    expected = tables_of(Path(one.home) / "store" / "changes", [whole.batch])
    got = tables_of(root, [b.batch for b in batches])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert rows(got[name]) == rows(table), name
    # every spill object but the last batch's is gone, and nothing is left open at the end
    final = load_progress(store, Layout())
    assert final is not None and final.open_txns == []
    assert final.confirmed_lsn == max(
        max(r[stream.COMMIT_LSN] for r in rows(t)) for t in expected.values())
    assert decode_batch(cut, spark=spark) is None
    leftovers = [i.key for i in store.list("spill/")]
    assert leftovers == [], leftovers
    json.dumps(final.to_json())  # progress is plain JSON


def test_a_backlog_is_decoded_as_bounded_batches_in_one_step(pg: LocalPostgres,
                                                            archived: Archived, tmp_path: Path,
                                                            spark: Any) -> None:
    """``max_batch_segments`` cuts the archive into batches of two segments; the decode step
    takes them all, one after the other, and together they are the one-batch stream."""
    one = _config(tmp_path, "one", pg.dsn(archived.database))
    ship_to(one, archived)
    whole = decode_batch(one, spark=spark)
    assert whole is not None

    bounded = _config(tmp_path, "bounded", pg.dsn(archived.database)).replace(
        max_batch_segments=2)
    ship_to(bounded, archived)
    out = steps.decode(bounded, spark=spark)
    segs = archived.segments
    assert len(out["batches"]) == (len(segs) + 1) // 2 >= 2, out["batches"]
    assert out["segments"] == segs and out["commits"] == whole.commits
    assert out["end_lsn"] == format_lsn(whole.end_lsn)
    progress = load_progress(open_store(bounded), Layout())
    assert progress is not None and progress.seq == len(out["batches"])
    expected = tables_of(Path(one.home) / "store" / "changes", [whole.batch])
    got = tables_of(Path(bounded.home) / "store" / "changes", out["batches"])
    assert set(got) == set(expected)
    for name, table in expected.items():
        assert rows(got[name]) == rows(table), name
    assert steps.decode(bounded, spark=spark)["batch"] is None


def test_spark_settings_reach_a_new_session(tmp_path: Path) -> None:
    """``CDCLAKE_SPARK_CONF`` is applied when cdclake starts Spark (a fresh JVM: the driver's
    memory can only be set there)."""
    probe = ("from cdclake.config import Config\n"
             "from cdclake.spark.job import spark_session\n"
             "conf = spark_session(Config.load()).sparkContext.getConf()\n"
             "print(conf.get('spark.driver.memory'), conf.get('spark.driver.maxResultSize'))")
    env = {**os.environ, "CDCLAKE_HOME": str(tmp_path),
           "CDCLAKE_SPARK_CONF": "spark.driver.memory=1g,spark.driver.maxResultSize=64m"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert out.split()[-2:] == ["1g", "64m"], out


def test_one_batch_over_s3(pg: LocalPostgres, archived: Archived, tmp_path: Path, spark: Any,
                           s3_config: Config) -> None:
    local = _config(tmp_path, "local", pg.dsn(archived.database))
    ship_to(local, archived)
    ref = decode_batch(local, spark=spark, until_segment=archived.segments[1])
    assert ref is not None

    config = s3_config.replace(source_dsn=pg.dsn(archived.database), spark_partitions=2)
    ship_to(config, archived)
    result = decode_batch(config, spark=spark, until_segment=archived.segments[1])
    assert result is not None
    assert _without_batch(result.manifest) == _without_batch(ref.manifest)
    from cdclake.spark.job import changes_filesystem

    store = open_store(config)
    fs, root = changes_filesystem(config, store, "changes/x")
    got = tables_of(root.rsplit("/", 1)[0], [result.batch], fs)
    expected = tables_of(Path(local.home) / "store" / "changes", [ref.batch])
    assert {k: rows(v) for k, v in got.items()} == {k: rows(v) for k, v in expected.items()}
    progress = load_progress(store, Layout())
    assert progress is not None and any(t.spill for t in progress.open_txns)
