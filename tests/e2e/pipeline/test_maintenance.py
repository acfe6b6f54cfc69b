"""``cdclake maintain`` on mirrors a real stream wrote: files compacted, snapshots expired,
orphan files removed, and the watermark kept — the next runs neither lose nor repeat a change
(the mirrors, read with DuckDB, equal the source)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from cdclake.lake.catalog import open_catalog
from cdclake.lake.watermark import committed_lsn
from tests.e2e.pipeline.test_faults import Stream, bank_stream
from tests.e2e.pipeline.test_snapshot_cli import cdclake, ok

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stream]:
    with bank_stream(tmp_path_factory.mktemp("maintained")) as s:
        yield s


def test_maintenance_compacts_expires_and_keeps_the_watermark(bank: Stream) -> None:
    for i in range(3):  # three merges: several small files and snapshots per mirror
        bank.changes(rows=50)
        ok(cdclake(bank.env, "run", "--run-id", f"before-{i}"))
    config = bank.config
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

    out = ok(cdclake(bank.env, "maintain", "--keep-snapshots", "1", "--keep-hours", "0",
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
    bank.assert_mirrors_equal()

    bank.changes(rows=50)
    ok(cdclake(bank.env, "run", "--run-id", "after"))
    bank.assert_mirrors_equal()
