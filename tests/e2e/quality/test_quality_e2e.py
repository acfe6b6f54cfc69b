"""A batch as the decoder writes it and mirrors as Iceberg returns them, through the suites.

The change stream goes to disk in the layout of :mod:`cdclake.decoding.stream` (manifest plus
Parquet per relation version) and is read back with the lake's batch reader, the way the
ingest DAG reads it; the mirrors are written to and read from an Iceberg SQL catalog with
pyiceberg, so the string types and column order are those the lake really hands over.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from cdclake.catalog.model import RelationVersion
from cdclake.config import Config
from cdclake.errors import QualityError
from cdclake.lake.batch import read_batch
from cdclake.lsn import format_lsn
from cdclake.quality import QualityContext, raise_for_failures, validate_mirrors, validate_stream
from tests.support import quality_builders as builders
from tests.support.quality_builders import BIG

pytestmark = pytest.mark.e2e

ORDERS = builders.relation("public.orders", oid=16600)
# Not a NOTHING table here: the decoder's Arrow plugin gives such tables an ``_old_key`` of
# type struct<> and Parquet cannot store a struct without fields (reported to the lead); the
# NOTHING case is covered in memory by the unit tests.
AUDIT = builders.relation("public.audit", replident="f", key=(), oid=16601)


def _write_batch(root: Path, batch: str, streams: dict[RelationVersion, pa.Table]) -> None:
    directory = root / batch
    entries = []
    for rel, table in streams.items():
        rel_path = f"{rel.qualified}/v{rel.valid_from:016X}/part-0.parquet"
        (directory / rel_path).parent.mkdir(parents=True)
        pq.write_table(table, directory / rel_path)
        entries.append({"table": rel.qualified, "oid": rel.oid, "versions": [
            {"valid_from": rel.valid_from, "relation": rel.to_json(), "paths": [rel_path],
             "rows": table.num_rows}]})
    manifest = {"batch": batch, "start_lsn": BIG, "end_lsn": BIG + 2000, "commits": 3,
                "tables": entries}
    (directory / "_manifest.json").write_text(json.dumps(manifest))


def _read_stream(root: Path, batch: str) -> tuple[dict[str, pa.Table],
                                                  dict[str, RelationVersion]]:
    tables, relations = {}, {}
    for source in read_batch(root, batch):
        tables[source.table] = pa.concat_tables([v.changes for v in source.versions])
        relations[source.table] = source.latest
    return tables, relations


def _mirrors(tmp: Path, rows: list[dict]) -> dict[str, pa.Table]:
    tmp.mkdir()
    catalog = SqlCatalog("e2e", uri=f"sqlite:///{tmp / 'catalog.db'}",
                         warehouse=(tmp / "warehouse").as_uri())
    catalog.create_namespace("cdc")
    written = builders.mirror(ORDERS, rows)
    table = catalog.create_table("cdc.orders", schema=written.schema)
    table.append(written)
    return {"public.orders": catalog.load_table("cdc.orders").scan().to_arrow()}


def test_batch_and_iceberg_mirrors_pass_then_broken_ones_fail_the_task(
        tmp_path: Path, e2e_config: Config, e2e_context: QualityContext) -> None:
    changes_root = tmp_path / "changes"
    _write_batch(changes_root, "b0001", {
        ORDERS: builders.stream(ORDERS, builders.good_changes()),
        AUDIT: builders.stream(AUDIT, builders.full_changes()),
    })
    tables, relations = _read_stream(changes_root, "b0001")
    stream_report = validate_stream(e2e_config, tables, relations, run_name="b0001",
                                    context=e2e_context)
    raise_for_failures(stream_report)
    assert [(t.table, t.replica_identity, t.rows) for t in stream_report.tables] == [
        ("public.audit", "f", 3), ("public.orders", "d", 8)]

    mirror_rows = [{"id": 1, "note": "a2"}, {"id": 20, "note": "b"}]
    mirrors = _mirrors(tmp_path / "lake-good", mirror_rows)
    mirror_report = validate_mirrors(e2e_config, mirrors, {"public.orders": ORDERS},
                                     run_name="b0001-mirrors", context=e2e_context)
    raise_for_failures(mirror_report)

    # the next batch arrives out of commit order, and the merge left a placeholder behind
    broken = builders.good_changes()
    broken = [*broken[4:7], *broken[:4], broken[7]]
    _write_batch(changes_root, "b0002", {ORDERS: builders.stream(ORDERS, broken)})
    tables, relations = _read_stream(changes_root, "b0002")
    with pytest.raises(QualityError) as stream_error:
        raise_for_failures(validate_stream(e2e_config, tables, relations, run_name="b0002",
                                           context=e2e_context))
    assert "suite change_stream, table public.orders: Commit LSN never goes backwards" in str(
        stream_error.value)
    assert f"_commit_lsn={format_lsn(BIG + 500)}" in str(stream_error.value)

    mirrors = _mirrors(tmp_path / "lake-broken",
                       [*mirror_rows, {"id": 3, "note": "unchanged-toast-datum"}])
    with pytest.raises(QualityError) as mirror_error:
        raise_for_failures(validate_mirrors(e2e_config, mirrors, {"public.orders": ORDERS},
                                            run_name="b0002-mirrors", context=e2e_context))
    text = str(mirror_error.value)
    assert "suite mirror_table, table public.orders: Column note of mirror public.orders " \
        "holds no unresolved TOAST placeholder" in text
    assert "1 of 3 row(s) unexpected" in text and "note='unchanged-toast-datum'" in text

    index = e2e_config.reports_path() / "data_docs" / "index.html"
    html = index.read_text()
    for name in ("change_stream.main.public.orders", "change_stream.main.public.audit",
                 "mirror_table.main.public.orders", "b0001", "b0002"):
        assert name in html, name
