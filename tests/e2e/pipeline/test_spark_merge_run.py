"""`cdclake run` with ``CDCLAKE_MERGE_ENGINE=spark``: the whole pipeline on the Spark merge.

The bank's stream (tests/e2e/pipeline/test_faults.py): keyed tables and a REPLICA IDENTITY FULL
one, an initial snapshot, then rounds of every kind of change. The first round overlaps the
snapshot (the changes the snapshot saw are dropped on Spark by transaction visibility); the
keyed tables are MERGE INTO commits in every round; the FULL table, a multiset, goes to the
pyiceberg merge with the reason in the run report, but for a batch holding only its INSERTs
(an append on Spark). The mirror check runs on Spark DataFrames (GX's Spark engine). The
mirrors are compared with the source through DuckDB after every run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.pipeline.test_faults import bank_stream
from tests.e2e.pipeline.test_snapshot_cli import cdclake, ok

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_runs_on_the_spark_merge_keep_the_mirrors_exact(tmp_path: Path) -> None:
    with bank_stream(tmp_path / "home") as stream:
        stream.env["CDCLAKE_MERGE_ENGINE"] = "spark"
        engines: dict[str, set[tuple[str, str]]] = {}
        tags: list[dict[str, object]] = []
        for i in range(3):
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
