"""The columnar merge equals the replay: random keyed batches merged both ways, read back
through DuckDB, reports compared."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog

from cdclake.config import Config
from cdclake.lake import columnar
from cdclake.lake.batch import read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.merge import merge_batch, mirror_identifier
from tests.support.duck import rows as duck_rows
from tests.support.streamgen import Rel, Stream, relation

#: the report's fields both ways give alike (``rows_written`` counts the rows of the files a
#: batch rewrites: the two mirrors are cut into files differently)
FIELDS = ("inserted", "updated", "deleted", "truncated", "not_found", "skipped_applied",
          "strategy", "commit_lsn")


def grid() -> Rel:
    return relation("grid", [("x", pa.int16()), ("y", pa.string()), ("v", pa.int64()),
                             ("d", pa.date32())], key=["x", "y"])


def plain() -> Rel:
    return relation("plain", [("id", pa.int64()), ("v", pa.string())], key=["id"])


def _batches(stream: Stream, rng: random.Random, rel: Rel, key: Any, value: Any,
             n: int) -> list[str]:
    """``n`` batches of random inserts, updates (some moving the key, some of rows never
    inserted), deletes (some of absent rows) and now and then a TRUNCATE, after which the
    table's changes are under a new relation version (its new relfilenode)."""
    names = []
    for b in range(n):
        batch = stream.batch(f"b{b}")
        for _ in range(rng.randint(1, 6)):
            with batch.txn() as t:
                for _ in range(rng.randint(1, 12)):
                    r = rng.random()
                    k = key(rng.randint(0, 25))
                    if r < 0.4:
                        t.insert(rel, {**k, **value(rng)})
                    elif r < 0.65:
                        t.update(rel, {**k, **value(rng)})
                    elif r < 0.8:
                        t.update(rel, {**key(rng.randint(0, 25)), **value(rng)}, old=k)
                    elif r < 0.97:
                        t.delete(rel, k)
                    else:
                        t.truncate(rel)
                        rel = rel.evolve(stream.next_lsn())
        batch.write(rows_per_part=rng.choice([None, 3]))
        names.append(batch.name)
    return names


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("table", ["grid", "plain"])
@pytest.mark.parametrize("bucket_rows", [columnar.BUCKET_ROWS, 4], ids=["whole", "buckets"])
def test_columnar_equals_the_replay(tmp_path: Path, duck: Any, seed: int, table: str,
                                    bucket_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``buckets``, every batch of more than 4 pending changes is decided a bucket of
    keys at a time (its events and look-ups in files), as a bulk load of millions is."""
    rng = random.Random(seed)
    if table == "grid":
        rel = grid()
        def key(i: int) -> dict[str, Any]:
            return {"x": i % 5, "y": "ab"[i // 13]}
        def value(r: random.Random) -> dict[str, Any]:
            return {"v": r.randint(-9, 9), "d": None if r.random() < 0.2 else r.randint(0, 99)}
    else:
        rel = plain()
        def key(i: int) -> dict[str, Any]:
            return {"id": i}
        def value(r: random.Random) -> dict[str, Any]:
            return {"v": r.choice(["a", "b", None, "é"])}
    stream = Stream(tmp_path / "changes")
    names = _batches(stream, rng, rel, key, value, 5)
    merged: dict[str, Any] = {}
    calls = []
    real = columnar.merge
    monkeypatch.setattr(columnar, "merge", lambda *a, **k: calls.append(1) or real(*a, **k))
    # the Arrow merge writes a file per part it reads (a mirror's rows are never all held)
    monkeypatch.setattr(columnar, "FILE_BYTES", 1)
    monkeypatch.setattr(columnar, "BUCKET_ROWS", bucket_rows)
    dealt: list[int] = []
    real_buckets = columnar._Buckets

    class Buckets(real_buckets):  # type: ignore[misc,valid-type]
        def __init__(self, buckets: int, *args: Any) -> None:
            dealt.append(buckets)
            super().__init__(buckets, *args)

    monkeypatch.setattr(columnar, "_Buckets", Buckets)
    for way in ("columnar", "replay"):
        if way == "replay":
            monkeypatch.setattr(columnar, "takes", lambda batch, entry: None)
        config = Config(home=tmp_path / way, stream="test")
        catalog: Catalog = open_catalog(config)
        reports = []
        for name in names:
            report = merge_batch(catalog, config, read_batch(stream.root, name))
            assert not report.failed, report.failed
            reports.append([{f: getattr(t, f) for f in FIELDS} for t in report.tables])
        table_ = catalog.load_table(mirror_identifier(config, "public", rel.version.name))
        cols = [f.name for f in table_.schema().fields if f.name != "_cdc_pg_text"]
        merged[way] = (reports, sorted(duck_rows(table_, cols, duck), key=repr))
        # a re-run of the last batch commits nothing
        again = merge_batch(catalog, config, read_batch(stream.root, names[-1]))
        assert [t.strategy for t in again.tables] == ["none"] * len(again.tables)
    assert len(calls) == len(names) + 1  # every batch and the re-run went columnar
    assert merged["columnar"] == merged["replay"]
    assert (max(dealt) > 1) == (bucket_rows == 4)
