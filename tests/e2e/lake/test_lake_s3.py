"""A batch read from S3 and merged into a mirror whose warehouse is on S3 (moto_server)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import fs as pafs

from cdclake.config import Config
from cdclake.lake.batch import read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.merge import merge_batch, mirror_identifier
from cdclake.local.s3 import LocalS3
from tests.support.streamgen import Stream, relation

pytestmark = pytest.mark.e2e


def _s3fs(s3: LocalS3) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(access_key=s3.access_key_id, secret_key=s3.secret_access_key,
                             region=s3.region, endpoint_override=s3.endpoint_url,
                             scheme="http")


def test_merge_from_and_into_s3(local_s3: LocalS3, tmp_path: Path) -> None:
    rel = relation("orders", [("id", pa.int64()), ("amount", pa.decimal128(10, 2)),
                              ("note", pa.string())], key=["id"])
    stream = Stream(tmp_path / "changes")
    b = stream.batch("b1")
    with b.txn() as t:
        t.insert(rel, {"id": 1, "amount": Decimal("1.50"), "note": "x" * 3000})
        t.insert(rel, {"id": 2, "amount": Decimal("2.00"), "note": "n"})
    with b.txn() as t:
        t.update(rel, {"id": 1, "amount": Decimal("1.75"), "note": None}, unchanged=["note"])
        t.delete(rel, {"id": 2})
    local = b.write()
    s3 = _s3fs(local_s3)
    pafs.copy_files(str(local), f"{local_s3.bucket}/lake-e2e/changes/b1",
                    source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)

    config = local_s3.config(Config(home=tmp_path / "home", stream="s3"), prefix="lake-e2e")
    config = config.replace(warehouse=f"s3://{local_s3.bucket}/lake-e2e/warehouse")
    catalog = open_catalog(config)
    batch = read_batch(f"{local_s3.bucket}/lake-e2e/changes", "b1", filesystem=s3)
    report = merge_batch(catalog, config, batch)
    (r,) = report.tables
    assert (r.inserted, r.updated, r.deleted) == (2, 1, 1)

    table = catalog.load_table(mirror_identifier(config, "public", "orders"))
    assert table.location().startswith(f"s3://{local_s3.bucket}/lake-e2e/warehouse")
    got = table.scan(selected_fields=("id", "amount", "note")).to_arrow().to_pylist()
    assert [(g["id"], str(g["amount"]), g["note"]) for g in got] == [(1, "1.75", "x" * 3000)]
    keys = [o["Key"] for o in local_s3.client().list_objects_v2(
        Bucket=local_s3.bucket, Prefix="lake-e2e/warehouse/")["Contents"]]
    assert any(k.endswith(".parquet") for k in keys)

    again = merge_batch(catalog, config,
                        read_batch(f"{local_s3.bucket}/lake-e2e/changes", "b1", filesystem=s3))
    assert again.tables[0].skipped_applied == 4
    assert len(catalog.load_table(mirror_identifier(config, "public", "orders")).snapshots()) \
        == len(table.snapshots())
