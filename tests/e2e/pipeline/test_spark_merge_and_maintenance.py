"""`cdclake run` on the Spark merge, then ``cdclake maintain`` on the mirrors it wrote.

The bank's stream (tests/e2e/pipeline/test_faults.py): keyed tables and a REPLICA IDENTITY FULL
one, an initial snapshot, then rounds of every kind of change through ``cdclake run`` with
``CDCLAKE_MERGE_ENGINE=spark``. The first round overlaps the snapshot (the changes the snapshot
saw are dropped on Spark by transaction visibility); the keyed tables are MERGE INTO commits in
every round; the FULL table, a multiset, goes to the pyiceberg merge with the reason in the run
report, but for a batch holding only its INSERTs (an append on Spark). The mirror check runs on
Spark DataFrames (GX's Spark engine). The mirrors are compared with the source through DuckDB
after every run.

Those rounds leave each mirror several small files, position-delete files and snapshots:
``cdclake maintain`` then compacts them, expires snapshots, removes an orphan file and keeps
the watermark — and a run on the pyiceberg merge afterwards neither loses nor repeats a change.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cdclake.lake.catalog import open_catalog
from cdclake.lake.watermark import committed_lsn
from tests.e2e.pipeline.test_faults import Stream, bank_stream
from tests.e2e.pipeline.test_snapshot_cli import cdclake, ok

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_spark_merge_runs_then_maintenance_keep_the_mirrors_exact(tmp_path: Path) -> None:
    with bank_stream(tmp_path / "home") as stream:
        stream.env["CDCLAKE_MERGE_ENGINE"] = "spark"
        runs_on_the_spark_merge(stream)
        maintenance_compacts_expires_and_keeps_the_watermark(stream)
        stream.env["CDCLAKE_MERGE_ENGINE"] = "pyiceberg"
        stream.changes(rows=50)
        ok(cdclake(stream.env, "run", "--run-id", "after"))
        stream.assert_mirrors_equal()


def runs_on_the_spark_merge(stream: Stream) -> None:
    engines: dict[str, set[tuple[str, str]]] = {}
    tags: list[dict[str, object]] = []
    for i in range(2):  # the snapshot and two merges: several small files and snapshots
        stream.changes()
        out = ok(cdclake(stream.env, "run", "--run-id", f"spark-{i}", "--json"))
        stream.assert_mirrors_equal()
        report = json.loads(out.stdout)
        checked = report["steps"]["validate_tables"]
        assert checked["success"] and checked["checked_on"] == "spark", checked
        for batch in report["steps"]["merge"]["batches"]:
            for t in batch["tables"]:
                engines.setdefault(t["table"], set()).add((t["engine"], t["fallback"]))
                if t["table"] == "public.tags":
                    tags.append(t)
    for table in ("public.accounts", "public.events"):
        assert engines[table] == {("spark", "")}, engines[table]
    # FULL: its UPDATEs and DELETEs go to pyiceberg; a batch with only its INSERTs is an
    # append on Spark
    assert any(t["engine"] == "pyiceberg" for t in tags)
    for t in tags:
        if t["engine"] == "pyiceberg":
            assert "FULL or NOTHING with UPDATEs or DELETEs" in str(t["fallback"]), t
        else:
            assert t["strategy"] in ("append", "none"), t  # none: all in the snapshot
            assert (t["updated"], t["deleted"]) == (0, 0), t


def maintenance_compacts_expires_and_keeps_the_watermark(stream: Stream) -> None:
    config = stream.config
    catalog = open_catalog(config)
    names = sorted(".".join(t) for t in catalog.list_tables(config.namespace))
    tables = {n: catalog.load_table(n) for n in names}
    watermarks = {n: committed_lsn(t, config.stream) for n, t in tables.items()}
    assert any(len(t.metadata.snapshots) > 1 for t in tables.values())
    # a file no snapshot references, old enough to go
    data_dir = tables[names[0]].location().removeprefix("file://") + "/data"
    orphan = os.path.join(data_dir, "orphan-left-by-a-dead-writer.parquet")
    with open(orphan, "wb") as f:
        f.write(b"PAR1 not referenced by any snapshot")
    old = time.time() - 3 * 86400
    os.utime(orphan, (old, old))

    out = ok(cdclake(stream.env, "maintain", "--keep-snapshots", "1", "--keep-hours", "0",
                     "--json"))
    result = {t["table"]: t for t in json.loads(out.stdout)["tables"]}
    assert sorted(result) == names
    for name, t in result.items():
        assert t["snapshots_after"] == 1, t
        assert t["data_files_after"] <= t["data_files_before"], t
        assert t["watermark"] == watermarks[name], t
    assert sum(t["rewritten_data_files"] for t in result.values()) > 0, result
    assert sum(t["orphan_files"] for t in result.values()) >= 1, result
    assert not os.path.exists(orphan)
    catalog = open_catalog(config)
    for name in names:  # the watermark survives the expiry of every snapshot that held it
        assert committed_lsn(catalog.load_table(name), config.stream) == watermarks[name]
    stream.assert_mirrors_equal()
