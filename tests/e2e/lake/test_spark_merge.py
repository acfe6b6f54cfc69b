"""The Spark merge (``merge_engine = "spark"``): one MERGE INTO per table, merge-on-read.

A real PostgreSQL 15 stream in three batches, decoded from the archived WAL and merged with
Iceberg's Spark runtime. The batches exercise what the reduction must get right: a key that
changes (and changes back), a key inserted, updated and deleted inside one batch, a row updated
twice, a bulk load before its primary key in the same batch, TOASTed values left unchanged by
updates (once in a chain inside the batch, once from the mirror), ADD COLUMN and RENAME COLUMN
between changes of one batch, a TRUNCATE mid-batch, uuid keys, and a table with REPLICA
IDENTITY FULL that the Spark path leaves to the pyiceberg merge, saying why.

Every mirror is then read with DuckDB's iceberg extension and with Spark SQL and compared with
the source (as multisets). The Spark-merged mirrors hold position deletes and no equality
deletes, each batch's commit LSN sits in the MERGE's own snapshot summary, and merging a
batch again commits nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.decoding.session import DecodeOptions
from cdclake.lake.arrowmerge import ArrowMerge
from cdclake.lake.batch import Batch, read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.merge import MergeReport, merge_batch
from cdclake.lake.sparkmerge import SparkMerge
from cdclake.lake.tables import mirror_identifier
from cdclake.lake.watermark import COMMIT_LSN, committed_lsn
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.pipeline.steps import MERGE_TASKS
from cdclake.spark import job
from cdclake.sparkenv.session import session as spark_session
from tests.e2e.lake.test_spark_sql_reads_mirrors import _decode
from tests.oracle.decoding.harness import archive_all
from tests.support import duck

pytestmark = pytest.mark.e2e

#: a value PostgreSQL stores out of line (incompressible, over 2 kB)
BIG = "(SELECT string_agg(md5(g::text || {seed}), '') FROM generate_series(1, 200) g)"

SETUP = [
    """CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2),
         seen timestamptz)""",
    "CREATE TABLE docs (id bigint PRIMARY KEY, n int, body text)",
    "CREATE TABLE tokens (id uuid PRIMARY KEY, label text)",
    "CREATE TABLE plain (a int, b text)",
    "ALTER TABLE plain REPLICA IDENTITY FULL",
    "CREATE TABLE log (at int, msg text)",  # no key: replica identity NOTHING
    "CREATE TABLE retyped (id int PRIMARY KEY, n text, at timestamp)",
    # a row from before the stream: no mirror holds it
    "CREATE TABLE orphan (id int PRIMARY KEY, n int, body text)",
    f"INSERT INTO orphan VALUES (1, 0, {BIG.format(seed=99)})",
]
BATCHES = [
    [
        "INSERT INTO items SELECT g, 'item ' || g, g * 1.25, timestamptz '2024-01-01 UTC' "
        "+ g * interval '1 minute' FROM generate_series(1, 200) g",
        *(f"INSERT INTO docs VALUES ({i}, 0, {BIG.format(seed=i)})" for i in range(1, 7)),
        "INSERT INTO tokens SELECT md5(g::text)::uuid, 't' || g FROM generate_series(1, 20) g",
        "INSERT INTO plain VALUES (1, 'x'), (1, 'x'), (2, 'y')",
        "INSERT INTO log VALUES (1, 'a'), (1, 'a'), (2, 'b')",
        # a bulk load, then its primary key (as pg_restore and pgbench -i do), in one batch
        "CREATE TABLE bulk (id int, v text)",
        "INSERT INTO bulk SELECT g, 'v' || g FROM generate_series(1, 500) g",
        "ALTER TABLE bulk ADD PRIMARY KEY (id)",
        "UPDATE bulk SET v = 'changed' WHERE id <= 10",
        "DELETE FROM bulk WHERE id > 490",
        "INSERT INTO retyped SELECT g, (g * 10)::text, timestamp '2024-01-01' "
        "+ g * interval '1 hour' FROM generate_series(1, 20) g",
    ],
    [
        "UPDATE items SET price = price + 1 WHERE id % 10 = 0",
        "UPDATE items SET name = 'twice ' || id WHERE id % 10 = 0",
        "DELETE FROM items WHERE id BETWEEN 50 AND 59",
        "UPDATE items SET id = id + 1000 WHERE id IN (3, 4)",  # key changes
        "UPDATE items SET id = 3 WHERE id = 1003",  # and back
        "INSERT INTO items VALUES (500, 'short-lived', 1, now())",
        "UPDATE items SET name = 'still short-lived' WHERE id = 500",
        "DELETE FROM items WHERE id = 500",
        "DELETE FROM items WHERE id = 7",
        "INSERT INTO items VALUES (7, 'reborn', 7, NULL)",
        # unchanged TOAST: from the mirror (1, 2), a chain in the batch (3), rewritten (4)
        "UPDATE docs SET n = n + 1 WHERE id IN (1, 2, 3)",
        "UPDATE docs SET n = n + 1 WHERE id = 3",
        f"UPDATE docs SET body = {BIG.format(seed=40)} WHERE id = 4",
        "UPDATE docs SET n = 9 WHERE id = 4",
        "DELETE FROM docs WHERE id = 5",
        "UPDATE tokens SET label = upper(label) WHERE label LIKE 't1%'",
        "DELETE FROM tokens WHERE label = 't2'",
        "DELETE FROM plain WHERE a = 1",  # one of two identical rows: a multiset
        "INSERT INTO log VALUES (3, 'lost')",
        "TRUNCATE log",
        "INSERT INTO log VALUES (4, 'c'), (4, 'c')",
        "UPDATE bulk SET v = 'again' WHERE id BETWEEN 11 AND 20",
        # TRUNCATE mid-batch: what came before is superseded, what follows lands
        "UPDATE tokens SET label = 'gone' WHERE label = 't3'",
        "TRUNCATE tokens",
        "INSERT INTO tokens SELECT md5((g * 7)::text)::uuid, 'after ' || g "
        "FROM generate_series(1, 5) g",
        "UPDATE tokens SET label = 'after, updated' WHERE label = 'after 1'",
        # TimeZone is UTC: no rewrite, the stored microseconds are read as instants
        "ALTER TABLE retyped ALTER at TYPE timestamptz",
        "UPDATE retyped SET at = at + interval '1 day' WHERE id = 1",
    ],
    [
        "UPDATE items SET price = 0 WHERE id = 1",
        "ALTER TABLE items ADD COLUMN note text",
        "UPDATE items SET note = 'noted ' || id WHERE id % 20 = 1",
        "ALTER TABLE items RENAME COLUMN name TO title",
        "UPDATE items SET title = 'renamed' WHERE id = 2",
        "INSERT INTO items (id, title, price, note) VALUES (900, 'new', 9, 'n')",
        "UPDATE docs SET n = 100 WHERE id = 2",
        "INSERT INTO plain VALUES (3, 'z')",
        "INSERT INTO log VALUES (4, 'c')",
        "ALTER TABLE retyped ALTER n TYPE int USING n::int",  # a rewrite
        "UPDATE retyped SET n = n + 1 WHERE id <= 3",
        "INSERT INTO retyped VALUES (21, 210, now())",
    ],
]
#: source table -> the columns compared, after the last batch
COLUMNS = {
    "public.items": ["id", "title", "price", "seen", "note"],
    "public.docs": ["id", "n", "body"],
    "public.tokens": ["id", "label"],
    "public.plain": ["a", "b"],
    "public.bulk": ["id", "v"],
    "public.log": ["at", "msg"],
    "public.retyped": ["id", "n", "at"],
}
#: every change of these goes through the Spark merge (MERGE INTO, or for log, which has no
#: key, INSERT INTO and a TRUNCATE's INSERT OVERWRITE)
SPARK_TABLES = {"public.items", "public.docs", "public.tokens", "public.bulk", "public.log"}


@dataclass
class Lake:
    pg: LocalPostgres
    database: str
    config: Config
    spark: Any
    root: Path
    options: DecodeOptions  #: of the next batch (its start_lsn / end_lsn are set per batch)
    reports: list[MergeReport] = field(default_factory=list)

    def decode(self, name: str, statements: list[str]) -> Batch:
        """Run ``statements`` on the source and decode what they wrote as batch ``name``."""
        for stmt in statements:
            self.pg.sql(stmt, self.database)
        hi = archive_all(self.pg, self.database)
        self.options = dataclasses.replace(self.options, end_lsn=hi)
        _decode(self.pg, self.options, self.root, name)
        self.options = dataclasses.replace(self.options, start_lsn=hi)
        return read_batch(self.root, name)

    def merge(self, batch: Batch) -> MergeReport:
        """Merge ``batch`` on the Spark engine (the pyiceberg one taking what it declines),
        with a catalog of its own, as a separate run would."""
        catalog = open_catalog(self.config)
        return merge_batch(catalog, self.config, batch, engine=SparkMerge(
            self.spark, catalog, self.config, fallback=ArrowMerge(catalog, self.config)))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        db = pg.create_database("shop")
        read_from = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        pg.sql("CHECKPOINT")
        key = install(pg.dsn(db)).key
        for stmt in SETUP:
            pg.sql(stmt, db)
        # the stream starts here: rows written before are in no batch (nor in the mirror)
        lo = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = current_database()",
                        db)[0][0]
        tmp = tmp_path_factory.mktemp("sparkmerge")
        config = Config(home=tmp / "home", stream="sparkmerge", spark_master="local[2]",
                        merge_engine="spark")
        catalog = open_catalog(config)
        spark = spark_session(config, "test", tasks=(job.__name__, *MERGE_TASKS))
        engine = SparkMerge(spark, catalog, config, fallback=ArrowMerge(catalog, config))
        lake = Lake(pg, db, config, spark, tmp / "changes",
                    DecodeOptions(db_oid=db_oid, start_lsn=lo, read_from=read_from,
                                  spill_dir=tmp / "spill", ddl_key=key))
        for i, statements in enumerate(BATCHES):
            batch = lake.decode(f"b{i}", statements)
            lake.reports.append(merge_batch(catalog, config, batch, engine=engine))
        yield lake
        spark.stop()
    finally:
        pg.destroy()


def _table(lake: Lake, source: str) -> Any:
    return open_catalog(lake.config).load_table(mirror_identifier(lake.config,
                                                                  *source.split(".")))


def _source(lake: Lake, table: str) -> Counter[tuple[Any, ...]]:
    cols = ", ".join(f'"{c}"' for c in COLUMNS[table])
    rows = lake.pg.sql(f"SELECT {cols} FROM {table}", lake.database)
    return Counter(tuple(str(v) if _is_uuid(v) else v for v in r) for r in rows)


def _is_uuid(v: Any) -> bool:
    return type(v).__name__ == "UUID"


def _duck(lake: Lake, table: str) -> Counter[tuple[Any, ...]]:
    rows = duck.rows(_table(lake, table), COLUMNS[table])
    return Counter(tuple(str(r[c]) if _is_uuid(r[c]) else r[c] for c in COLUMNS[table])
                   for r in rows)


def _spark_name(lake: Lake, table: str) -> str:
    ns, name = mirror_identifier(lake.config, *table.split("."))
    return f"{lake.config.catalog_name}.{ns}.{name}"


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_duckdb_reads_what_the_source_holds(lake: Lake, table: str) -> None:
    source, mirror = _source(lake, table), _duck(lake, table)
    assert sum(source.values()) > 0
    assert mirror == source, (f"only in source {list((source - mirror).elements())[:3]}, "
                              f"only in mirror {list((mirror - source).elements())[:3]}")


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_spark_sql_reads_what_the_source_holds(lake: Lake, table: str) -> None:
    # the session's catalog caches a table it read (for 30 s): the merge read public.retyped
    # on Spark before leaving it to pyiceberg, whose commit the cached metadata predates
    lake.spark.catalog.refreshTable(_spark_name(lake, table))
    df = lake.spark.table(_spark_name(lake, table)).select(*COLUMNS[table])
    mirror = Counter(tuple(r) for r in df.collect())
    # Spark shows a timestamptz as a naive time in the session's zone (UTC)
    source = Counter({tuple(_naive_utc(v) for v in row): n
                      for row, n in _source(lake, table).items()})
    assert mirror == source


def _naive_utc(v: Any) -> Any:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    return v


def test_tables_take_the_spark_path_or_say_why_not(lake: Lake) -> None:
    for report in lake.reports:
        engines = {t.table: (t.engine, t.fallback) for t in report.tables}
        for table in SPARK_TABLES & engines.keys():
            assert engines[table] == ("spark", ""), (table, engines[table])
    # a table without a key: its INSERTs are appended on Spark, a DELETE is not for Spark
    plain = [next(t for t in r.tables if t.table == "public.plain") for r in lake.reports]
    assert [(t.engine, t.strategy) for t in plain] == [
        ("spark", "append"), ("pyiceberg", plain[1].strategy), ("spark", "append")]
    assert "FULL or NOTHING with UPDATEs or DELETEs" in plain[1].fallback
    log = [next(t for t in r.tables if t.table == "public.log").strategy for r in lake.reports]
    assert log == ["append", "truncate", "append"]


def test_a_column_type_change_is_left_to_pyiceberg_which_replaces_the_field(lake: Lake) -> None:
    """A type change no Iceberg promotion holds (timestamp -> timestamptz without a rewrite:
    the stored values converted; text -> int by a rewrite) is not for a MERGE, which Spark
    commits apart from the schema: the Spark path leaves the table to the pyiceberg merge,
    which replaces the field (a new field id) in the commit that writes the values. DuckDB
    and Spark SQL read the result as the source holds it (above)."""
    tables = [next(t for t in r.tables if t.table == "public.retyped") for r in lake.reports]
    assert [(t.engine, t.strategy) for t in tables] == [
        ("spark", "merge-on-read"), ("pyiceberg", "full-rewrite"), ("pyiceberg", "rewrite")]
    assert tables[1].fallback == ("column at (attnum 3) changed type from timestamp to "
                                  "timestamptz, which Iceberg cannot promote (replaced in the "
                                  "commit that writes its new values)")
    assert tables[2].fallback.startswith("column n (attnum 2) changed type from string to int")
    assert tables[2].schema_changes == ["replace column n by a new field n int (attnum 2)"]
    table = _table(lake, "public.retyped")
    first = table.schemas()[0]
    for name in ("n", "at"):
        assert table.schema().find_field(name).field_id != first.find_field(name).field_id


def test_the_stream_left_toasted_values_unchanged(lake: Lake) -> None:
    """The TOAST cases above are real: the decoded batch says which values were not logged."""
    batch = read_batch(lake.root, "b1")
    docs = batch.load(next(e for e in batch.entries if e.table == "public.docs"))
    unchanged = [(row, toast) for v in docs.versions
                 for row, toast in zip(v.changes.column("id").to_pylist(),
                                       v.changes.column("_unchanged_toast").to_pylist(),
                                       strict=True) if toast]
    assert sorted(row for row, _ in unchanged) == [1, 2, 3, 3, 4], unchanged
    assert all(toast == ["body"] for _, toast in unchanged)


def test_a_truncate_mid_batch_overwrites_the_mirror(lake: Lake) -> None:
    tokens = next(t for t in lake.reports[1].tables if t.table == "public.tokens")
    assert (tokens.engine, tokens.strategy, tokens.truncated) == ("spark", "truncate", 1)
    assert sorted(r[1] for r in lake.pg.sql("SELECT * FROM tokens", lake.database)) == sorted(
        r["label"] for r in duck.rows(_table(lake, "public.tokens"), ["label"]))


def test_counts_are_those_of_the_changes(lake: Lake) -> None:
    items = next(t for t in lake.reports[1].tables if t.table == "public.items")
    # 20 + 20 updates, 3 key changes, 1 of the short-lived row; 10 + 2 deletes; 2 inserts
    assert (items.inserted, items.updated, items.deleted) == (2, 44, 12)
    assert items.strategy == "merge-on-read" and items.not_found is None


@pytest.mark.parametrize("table", sorted(SPARK_TABLES))
def test_position_deletes_never_equality_deletes(lake: Lake, table: str) -> None:
    content = {r[0]: r[1] for r in lake.spark.sql(
        f"SELECT content, count(*) FROM {_spark_name(lake, table)}.all_files "
        "GROUP BY content").collect()}
    if table not in ("public.tokens", "public.log"):  # only appended to and overwritten
        assert content.get(1, 0) > 0, content  # the replaced rows are deleted by position
    assert 2 not in content, content


def test_the_merge_commit_carries_the_commit_lsn(lake: Lake) -> None:
    batch = read_batch(lake.root, "b2")
    entry = next(e for e in batch.entries if e.table == "public.items")
    last = max(max(v.changes.column("_commit_lsn").to_pylist())
               for v in batch.load(entry).versions)
    items = _table(lake, "public.items")
    assert committed_lsn(items, lake.config.stream) == last
    snap = items.current_snapshot()
    assert snap.summary.operation.value == "overwrite"  # the MERGE's own commit
    assert snap.summary.additional_properties[COMMIT_LSN] == str(last)


def test_the_schema_followed_the_source(lake: Lake) -> None:
    items = lake.reports[2].tables[[t.table for t in lake.reports[2].tables].index(
        "public.items")]
    assert any("add column note" in c for c in items.schema_changes), items.schema_changes
    assert any("rename column name to title" in c for c in items.schema_changes)


def test_merging_a_batch_again_commits_nothing(lake: Lake) -> None:
    before = {t: _table(lake, t).current_snapshot().snapshot_id for t in SPARK_TABLES}
    again = lake.merge(read_batch(lake.root, "b2"))
    for t in again.tables:
        if t.table in SPARK_TABLES:
            assert t.skipped_applied == t.changes > 0, t
            assert t.snapshot_id == before[t.table]
    assert {t: _table(lake, t).current_snapshot().snapshot_id for t in SPARK_TABLES} == before


def test_of_two_overlapping_merges_of_a_table_without_a_key_one_appends(
        lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge A reads the keyless mirror's commit LSN and plans its append, then stalls before
    it commits; merge B (which took over the lake lease meanwhile) merges the same batch.
    When A commits, Iceberg refuses the append (nothing may have been added since the
    snapshot A planned from), and A finds the batch applied: the rows are there once."""
    from cdclake.lake import sparkmerge

    batch = lake.decode("b-race", ["INSERT INTO log VALUES (5, 'e'), (5, 'e'), (6, 'f')"])
    real = sparkmerge.with_commit_properties
    other: list[MergeReport] = []

    def stalled(spark: Any, properties: Any, run: Any) -> None:  # A, about to commit
        monkeypatch.setattr(sparkmerge, "with_commit_properties", real)
        other.append(lake.merge(batch))
        real(spark, properties, run)

    monkeypatch.setattr(sparkmerge, "with_commit_properties", stalled)
    mine = lake.merge(batch)
    assert _duck(lake, "public.log") == _source(lake, "public.log")
    b, a = other[0].tables[0], mine.tables[0]
    assert (b.table, b.engine, b.strategy, b.rows_written) == ("public.log", "spark", "append",
                                                                3)
    assert (a.engine, a.commit_lsn) == ("spark", b.commit_lsn)
    assert _table(lake, "public.log").current_snapshot().snapshot_id == b.snapshot_id


def test_an_unchanged_toast_value_the_mirror_lacks_stops_the_merge(lake: Lake) -> None:
    """The UPDATE does not log the TOASTed body and the mirror never had the row: nothing to
    take the value from. The table's merge fails, naming table, column and the fix; nothing
    commits, and the batch stays pending."""
    batch = lake.decode("b-orphan", ["UPDATE orphan SET n = 1 WHERE id = 1"])
    report = lake.merge(batch)
    assert [f["table"] for f in report.failed] == ["public.orphan"]
    assert report.end_lsn == report.previous_end_lsn
    message = report.failed[0]["error"]
    assert message.startswith("table public.orphan: an UPDATE left the TOASTed column body "
                              "unchanged"), message
    assert message.endswith("cdclake snapshot --tables public.orphan")
    orphan = _table(lake, "public.orphan")
    assert orphan.current_snapshot() is None


def test_the_rules_on_spark_decide_as_in_python(lake: Lake) -> None:
    """The merge's rules (cdclake.lake.rules) in the Spark dialect, on every case the Python
    and Arrow dialects are held to (tests/unit/lake/test_rules.py); and the snapshot handoff
    against SnapshotFacts.in_snapshot, over xids around the snapshot's xmin, xip and xmax,
    across an epoch boundary, and commit LSNs either side of its end."""
    from pyspark.sql import functions as F

    from cdclake.lake.sparkmerge import SPARK
    from cdclake.lake.visibility import SnapshotFacts, in_snapshot
    from tests.support.rule_cases import CASES, COLUMNS, decide, python_decisions

    frame = lake.spark.createDataFrame(
        CASES, "op string, old_a long, old_b string, new_a long, new_b string, c1 long, "
        "l1 long, s1 long, c2 long, l2 long, s2 long")
    decided = decide(SPARK, [F.col(c) for c in COLUMNS])
    rows = frame.select(*COLUMNS, *(v.alias(k) for k, v in decided.items())).collect()
    got = {tuple(r[c] for c in COLUMNS): {k: r[k] for k in decided} for r in rows}
    assert got == dict(zip(CASES, python_decisions(), strict=True))

    epoch = 1 << 32
    cases = [SnapshotFacts("s", 100, 200, 1000, 1010, (1002, 1005), 0),
             SnapshotFacts("s", 100, 200, 5 * epoch - 3, 5 * epoch + 4, (5 * epoch + 1,), 0),
             SnapshotFacts("s", 100, 200, 7 * epoch + 50, 7 * epoch + 50, (), 0)]
    for facts in cases:
        xids = sorted({(facts.xmax + d) % epoch for d in range(-12, 12)} | {0, 3, epoch - 1,
                      (facts.xmax + (1 << 31) - 1) % epoch, (facts.xmax - (1 << 31)) % epoch})
        rows = [(lsn, xid) for lsn in (150, 199, 200, 250) for xid in xids]
        got = (lake.spark.createDataFrame(rows, "lsn long, xid long")
               .select("lsn", "xid", (~in_snapshot(SPARK, facts, F.col("lsn"), F.col("xid")))
                       .alias("pending")).collect())
        assert {(r.lsn, r.xid): r.pending for r in got} == {
            (lsn, xid): not facts.in_snapshot(lsn, xid) for lsn, xid in rows}


def test_the_frame_rules_on_spark_carry_and_pick_as_the_replay(lake: Lake) -> None:
    """The batch rules (cdclake.lake.rules.carry, last_per_key) in the Spark dialect, as the
    Spark merge applies them (sparkmerge.last_per_key: one column left unchanged), against
    the replay's sequential walk (tests/support/rule_cases.py): every event's carried value
    and whether it is still the mirror's, then each key's last event."""
    from pyspark.sql import functions as F

    from cdclake.lake import rules
    from cdclake.lake.sparkmerge import SPARK, last_per_key
    from tests.support.rule_cases import EVENT_COLUMNS, events, replayed

    schema = ("k1 long, k2 string, _commit_lsn long, _lsn long, _seq long, sets boolean, "
              "v string, unchanged boolean")
    for seed in (7, 8):
        batch = events(seed)
        carried, last = replayed(batch)
        frame = lake.spark.createDataFrame(batch, schema)
        value, still = rules.carry(SPARK, frame, ["k1", "k2"], F.col("v"), F.col("unchanged"),
                                   F.col("sets"))
        got = {tuple(r[c] for c in EVENT_COLUMNS): (r["carried"], r["still"]) for r in
               frame.select(*EVENT_COLUMNS, value.alias("carried"), still.alias("still"))
               .collect()}
        assert got == carried
        assert {c for _v, c in got.values()} == {True, False}
        # as the merge names them: its kinds, and the flag of an unchanged column
        named = frame.select(
            "k1", "k2", *rules.ORDER, F.when(F.col("sets"), "set").otherwise("del")
            .alias("_kind"), "v", F.col("unchanged").alias("_unchanged_v"))
        picked = {(r.k1, r.k2): r for r in last_per_key(named, ["k1", "k2"], ["v"]).collect()}
        assert picked.keys() == last.keys()
        for key, event in last.items():
            row = picked[key]
            assert tuple(row[c] for c in rules.ORDER) == event[2:5]
            assert (row["v"], row["_unchanged_v"]) == carried[event]


def test_the_mirror_check_on_spark_finds_what_a_run_broke(lake: Lake, tmp_path: Path) -> None:
    """The mirror suite on Spark DataFrames (GX's Spark engine), scoped as a run scopes it:
    the rows written after the mirror's previous LSN plus the stored rows sharing their keys.
    A copy of items gets a row repeating a stored key and a row holding a TOAST placeholder,
    both "written by the run"."""
    import pyarrow as pa

    from cdclake.lake.sparkmerge import spark_mirrors
    from cdclake.quality import validate_mirrors
    from cdclake.quality.context import QualityContext

    catalog = open_catalog(lake.config)
    items = _table(lake, "public.items")
    rows = items.scan().to_arrow()
    config = lake.config.replace(namespace="checks")
    catalog.create_namespace_if_not_exists("checks")
    copy = catalog.create_table(("checks", items.name()[-1]), schema=items.schema())
    copy.append(rows)
    before = max(rows.column("_cdc_commit_lsn").to_pylist())
    planted = rows.slice(0, 2).to_pylist()
    planted[1]["id"], planted[1]["title"] = 9999, "unchanged-toast-datum"
    for row in planted:
        row["_cdc_commit_lsn"] = before + 1
    copy.append(pa.Table.from_pylist(planted, schema=rows.schema))
    entry = next(e for e in read_batch(lake.root, "b2").entries if e.table == "public.items")
    relation = entry.versions[-1].relation
    frames, missing, unreadable = spark_mirrors(lake.spark, config, catalog,
                                                {"public.items": relation},
                                                since={"public.items": before})
    assert (missing, unreadable) == ([], [])
    # the two written rows, and the stored row whose key one of them repeats
    assert frames["public.items"].count() == 3
    report = validate_mirrors(config, frames, {"public.items": relation},
                              context=QualityContext(tmp_path / "reports"))
    failed = {f.check: f for _, f in report.failures()}
    assert set(failed) == {"key_unique", "no_toast_placeholder"}, report.summary()
    assert failed["key_unique"].unexpected_count == 2
    assert {s["id"] for s in failed["key_unique"].samples} == {planted[0]["id"]}
    # the full check sees the same
    whole, _, _ = spark_mirrors(lake.spark, config, catalog, {"public.items": relation})
    assert whole.get("public.items").count() == rows.num_rows + 2
