"""The initial snapshot's chunk copy against the change stream, on PostgreSQL 15 and 18.

Every type and edge value of the oracle's catalog goes into one table twice over: as rows
inserted after ``cdclake source install`` — decoded from the archived WAL and merged into an
Iceberg mirror — and as the same rows copied from an exported snapshot by
:func:`cdclake.snapshot.chunks.copy_chunk`, both ways it reads COPY: CSV with Arrow kernels
(the default) and text value by value. The copied data file must hold exactly the mirror's
cells: typed values, NULLs, and ``_cdc_pg_text`` texts. A second test splits a table of a few
thousand rows (TOASTed values included) into three block ranges while other sessions change
it: together the chunks hold the snapshot's rows, each once. A TOASTed value longer than the
CSV parser's block sends its chunk down the text path, from scratch.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import pickle
import re
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg import sql
from pyarrow import fs as pafs
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.table import TableProperties

from cdclake.catalog.capture import capture
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import ArrowChanges, column_fields
from cdclake.decoding.rows import LayoutCache
from cdclake.decoding.session import DecodeOptions, decode
from cdclake.errors import SourceError
from cdclake.lake.batch import read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.labels import stored_labels
from cdclake.lake.merge import merge_batch, mirror_identifier
from cdclake.lake.schema import (
    CDC_COMMIT_LSN,
    CDC_COMMIT_TS,
    CDC_PG_TEXT,
    iceberg_schema,
)
from cdclake.lake.values import plain_values
from cdclake.local.postgres import LocalPostgres
from cdclake.snapshot import chunks
from cdclake.snapshot.chunks import ChunkResult, ChunkTask, copy_chunk, types_to_json
from cdclake.snapshot.copyrows import SESSION_SETTINGS, CopyRows
from cdclake.snapshot.mirror import snapshot_labels
from cdclake.wal.source import DirectorySource
from tests.oracle.decoding.harness import archive_all, prepare
from tests.oracle.features import server_supports
from tests.oracle.tuples.types_catalog import NEEDS, SETUP, TYPES, VERSIONED

pytestmark = pytest.mark.e2e

COMMIT_LSN = 0x7_0000_0028
COMMIT_TS_US = 1_717_236_000_000_001


@pytest.fixture(params=("compiled", "psycopg"))
def copy_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The two readers of COPY's output: the compiled one (its own libpq session; the binary
    format, or CSV in blocks of rows) and psycopg's (CSV a row at a time: where the compiled
    one is not built)."""
    if request.param == "psycopg":
        monkeypatch.setattr(chunks, "_copyout", None)
    else:
        assert chunks._copyout is not None, "cdclake.snapshot._copyout was not built"
    return str(request.param)


def _types(pg: LocalPostgres, conn: Any) -> list[tuple[str, list[str]]]:
    types = list(TYPES)
    types += [(t, v) for version, t, v in VERSIONED if pg.version >= version]
    types += [(t, v) for t, v, probe in NEEDS if server_supports(conn, probe)]
    return types


def _snapshot(pg: LocalPostgres, database: str) -> tuple[Any, str]:
    """A connection holding an exported snapshot open (the driver's role), and its id."""
    conn = pg.connect(database)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    return conn, conn.execute("SELECT pg_export_snapshot()").fetchone()[0]


def _task(pg: LocalPostgres, database: str, rel: Any, types: Any, schema: Any, snapshot: str,
          location: str, *, index: int = 0, first: int = 0, end: int | None = None,
          **kwargs: Any) -> ChunkTask:
    return ChunkTask(
        table=f"{rel.schema}.{rel.name}", oid=rel.oid, index=index, first_block=first,
        end_block=end, dsn=kwargs.pop("dsn", pg.dsn(database)), snapshot_id=snapshot,
        relation=rel.to_json(), types=types_to_json(rel, types),
        schema_json=schema.model_dump_json(), commit_lsn=COMMIT_LSN, commit_ts_us=COMMIT_TS_US,
        location=location, **kwargs)


def _cells(data: pa.Table, names: list[str]) -> dict[int, dict[str, Any]]:
    """rid -> column -> ("value", typed value as the merge holds it) / ("text", exact text)."""
    cols = {n: plain_values(data.column(n)) for n in names}
    texts = data.column(CDC_PG_TEXT).to_pylist()
    out: dict[int, dict[str, Any]] = {}
    for i in range(data.num_rows):
        row = {n: ("value", _norm(cols[n][i])) for n in names}
        row[CDC_PG_TEXT] = sorted(texts[i]) if texts[i] is not None else None
        out[cols["rid"][i]] = row
    return out


def _norm(v: Any) -> Any:
    """NaN equal to NaN, -0.0 apart from 0.0 (float values compare by their bits)."""
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v.hex())
    if isinstance(v, list):
        return [_norm(x) for x in v]
    return v


def _read_mirror(table: Any) -> tuple[pa.Table, Any]:
    """The mirror's data files as pyiceberg wrote them (one schema: nothing evolved), and
    their Parquet schema."""
    io = table.io
    parts = []
    for task in table.scan().plan_files():
        with io.new_input(task.file.file_path).open() as f:
            parquet = pq.ParquetFile(f)
            schema = parquet.schema
            parts.append(parquet.read())
    return pa.concat_tables(parts), schema


def test_copied_chunk_equals_the_merged_change_stream(pg: LocalPostgres, database: str,
                                                      tmp_path: Path) -> None:
    with pg.connect(database) as conn:
        for stmt in SETUP:
            conn.execute(stmt)
        types = _types(pg, conn)
        cols = [sql.SQL("rid int PRIMARY KEY"), sql.SQL("gone int")]
        cols += [sql.SQL("{} {}").format(sql.Identifier(f"c{i}"), sql.SQL(t))
                 for i, (t, _) in enumerate(types)]
        if pg.version >= 18:  # virtual generated: the WAL logs NULL, the mirror holds NULL
            cols.append(sql.SQL("gv int GENERATED ALWAYS AS (rid * 2) VIRTUAL"))
        conn.execute(sql.SQL("CREATE TABLE snap ({})").format(sql.SQL(", ").join(cols)))
        conn.execute("ALTER TABLE snap DROP COLUMN gone")  # a dropped slot among the columns
    cap = prepare(pg, database)  # install, and a slot: its running-xacts record starts decoding
    pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    with pg.connect(database) as conn:
        nrows = max(len(v) for _, v in types) + 1  # the last row: every column NULL
        for r in range(nrows):
            values = [sql.SQL(str(r))] + [
                sql.SQL(f"({v[r]})::{t}") if r < len(v) else sql.SQL("NULL")
                for t, v in types]
            names = [sql.Identifier("rid")] + [sql.Identifier(f"c{i}")
                                               for i in range(len(types))]
            conn.execute(sql.SQL("INSERT INTO snap ({}) VALUES ({})").format(
                sql.SQL(", ").join(names), sql.SQL(", ").join(values)))
    end = archive_all(pg, database)

    dictionary = Dictionary()
    plugins: list[ArrowChanges] = []

    def make(d: Dictionary, _version: int) -> ArrowChanges:
        plugins.append(ArrowChanges(pafs.LocalFileSystem(), str(tmp_path / "changes" / "b1"),
                                    "b1", d.types, rows_per_part=10))
        return plugins[-1]

    options = DecodeOptions(db_oid=cap.db_oid, start_lsn=cap.start_lsn,
                            read_from=cap.read_from, end_lsn=end, spill_dir=tmp_path / "spill",
                            ddl_key=cap.key)
    decode(DirectorySource(pg.archive_dir), dictionary, options, make)
    plugins[0].close(cap.start_lsn, end)
    batch = read_batch(tmp_path / "changes", "b1")
    config = Config(home=tmp_path / "home", stream="snap")
    catalog = open_catalog(config)
    merge_batch(catalog, config, batch)
    mirror = catalog.load_table(mirror_identifier(config, "public", "snap"))
    [entry] = [t for t in batch if t.table == "public.snap"]
    rel = entry.latest
    assert any(c.dropped for c in rel.columns)

    holder, snapshot = _snapshot(pg, database)
    try:
        # changes after the export are not in the snapshot
        pg.sql("UPDATE snap SET c0 = NOT c0 WHERE rid = 0", database)
        pg.sql("DELETE FROM snap WHERE rid = 1", database)
        location = f"file://{tmp_path}/home/warehouse/data/snap-1-public.snap-0.parquet"
        task = _task(pg, database, rel, dictionary.types, mirror.schema(), snapshot, location,
                     batch_rows=7)
        assert pickle.loads(pickle.dumps(task)) == task  # Spark ships it to the workers
        result = copy_chunk(task)
        others = {}  # the same chunk in COPY's other formats
        for fmt, change in (("csv", {"binary": False}), ("text", {"csv_block_bytes": 0})):
            where = location.replace(".parquet", f"-{fmt}.parquet")
            others[fmt] = (where, copy_chunk(dataclasses.replace(task, location=where,
                                                                 **change)))
    finally:
        holder.close()

    assert result.rows == nrows and result.attempts == 1
    # binary (every column its kind or its output function's text), CSV and kernels, text
    # value by value
    assert [result.format, *(r.format for _, r in others.values())] == \
        ["binary", "csv", "text"]
    assert result.path == location and result.bytes > 0
    ours = pq.read_table(location.removeprefix("file://"))
    merged, merged_parquet = _read_mirror(mirror)
    names = [f.name for f in mirror.schema().fields if not f.name.startswith("_cdc_")]
    # the same Parquet layout as the files pyiceberg writes for the mirror, field ids included
    ours_parquet = pq.ParquetFile(location.removeprefix("file://")).schema
    assert ours_parquet.equals(merged_parquet), (str(ours_parquet), str(merged_parquet))
    for f in mirror.schema().fields:
        assert ours.schema.field(f.name).metadata[b"PARQUET:field_id"] == \
            str(f.field_id).encode()
    got, want = _cells(ours, names), _cells(merged, names)
    assert sorted(got) == sorted(want) == list(range(nrows))
    for fmt, (where, other) in [("binary", (location, result)), *others.items()]:
        cells = got if fmt == "binary" else _cells(pq.read_table(where.removeprefix("file://")),
                                                   names)
        assert sorted(cells) == list(range(nrows)), fmt
        for rid in want:
            for name in [*names, CDC_PG_TEXT]:
                assert cells[rid][name] == want[rid][name], (fmt, rid, name, cells[rid][name],
                                                             want[rid][name])
        assert other.counts_only == result.counts_only, fmt
    assert any(row[CDC_PG_TEXT] for row in want.values())  # untypeable values were covered
    assert set(ours.column(CDC_COMMIT_LSN).to_pylist()) == {COMMIT_LSN}
    assert _storage_set(ours.column(CDC_COMMIT_TS)) == {COMMIT_TS_US}
    if pg.version >= 18:
        assert ours.column("gv").null_count == nrows
    # the enum labels the copied rows carry are those the merge recorded for the stream's
    layout = LayoutCache(dictionary.types).get(rel)
    fields = column_fields(layout, LayoutCache(dictionary.types).types_at(rel))
    ours_labels = snapshot_labels(rel, fields)
    assert ours_labels == stored_labels(mirror.properties) and ours_labels

    # the merge switched the same columns to counts-only metrics for the same values; with
    # them, pyiceberg can build the DataFile the driver will add
    prefix = f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}."
    merged_counts = sorted(k.removeprefix(prefix) for k, v in mirror.properties.items()
                           if k.startswith(prefix) and v == "counts")
    assert result.counts_only == merged_counts and merged_counts
    data_file = parquet_file_to_data_file(load_file_io({}, location), mirror.metadata,
                                          location)
    assert data_file.record_count == nrows


def _storage_set(col: pa.ChunkedArray) -> set[int]:
    return set(col.cast(pa.int64()).to_pylist())


# -- chunks ------------------------------------------------------------------------------------


BIG = "(SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 120) g)"


def _setup_big(pg: LocalPostgres, database: str) -> tuple[Any, Any, Any]:
    with pg.connect(database) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text, payload text, arr int[], "
                     "d date)")
        conn.execute("ALTER TABLE big ALTER COLUMN payload SET STORAGE EXTERNAL")
        conn.execute(f"""INSERT INTO big SELECT i, 'row ' || i,
                           CASE WHEN i % 10 = 0 THEN {BIG} END,
                           ARRAY[i, -i], date '2000-01-01' + i
                         FROM generate_series(1, 3000) i""")
        conn.execute("VACUUM ANALYZE big")
    return _installed(pg, database, "big")


def _installed(pg: LocalPostgres, database: str, table: str) -> tuple[Any, Any, Any]:
    """Install, capture the dictionary: (relation version, types, mirror schema) of
    ``table``."""
    install(pg.dsn(database))
    lsn, dictionary = capture(pg.dsn(database))
    oid = pg.sql(f"SELECT '{table}'::regclass::oid", database)[0][0]
    rel = dictionary.relation_for_oid(oid, lsn)
    assert rel is not None
    live = LayoutCache(dictionary.types).get(rel).live
    schema = iceberg_schema(rel, pa.schema([pa.field(lc.column.name, lc.codec.arrow_type)
                                            for lc in live]))
    return rel, dictionary.types, schema


def _source_rows(conn: Any) -> Counter[tuple[Any, ...]]:
    for s in SESSION_SETTINGS:
        conn.execute(s)
    return Counter(conn.execute("SELECT id, v, payload, arr::text, d::text FROM big")
                   .fetchall())


def _file_rows(path: str) -> list[tuple[Any, ...]]:
    data = pq.read_table(path)
    arr = data.column("arr").to_pylist()
    days = data.column("d").cast(pa.int32()).to_pylist()
    out = []
    for i, (rid, v, payload) in enumerate(zip(data.column("id").to_pylist(),
                                              data.column("v").to_pylist(),
                                              data.column("payload").to_pylist(), strict=True)):
        text = "{" + ",".join(str(x) for x in arr[i]) + "}"
        out.append((rid, v, payload, text, days[i]))
    return out


def test_three_chunks_hold_each_snapshot_row_once(pg: LocalPostgres, database: str,
                                                  tmp_path: Path, copy_reader: str) -> None:
    rel, types, schema = _setup_big(pg, database)
    pages = pg.sql("SELECT pg_relation_size('big') / current_setting('block_size')::int",
                   database)[0][0]
    toasted = pg.sql("SELECT pg_relation_size(reltoastrelid) FROM pg_class "
                     "WHERE relname = 'big'", database)[0][0]
    assert pages >= 6 and toasted > 0
    holder, snapshot = _snapshot(pg, database)
    try:
        expected = _source_rows(holder)  # the snapshot's rows, read in the snapshot
        # after the export: new versions of rows (in other blocks), deletes, inserts
        pg.sql("UPDATE big SET v = v || ' changed' WHERE id % 7 = 0", database)
        pg.sql("DELETE FROM big WHERE id % 11 = 0", database)
        pg.sql("INSERT INTO big SELECT i, 'late', NULL, NULL, NULL "
               "FROM generate_series(3001, 3100) i", database)
        bounds = [0, pages // 3, 2 * pages // 3, None]
        results: list[ChunkResult] = []
        for index in range(3):
            location = f"file://{tmp_path}/data/snap-big-{index}.parquet"
            results.append(copy_chunk(_task(
                pg, database, rel, types, schema, snapshot, location, index=index,
                first=bounds[index], end=bounds[index + 1], batch_rows=500)))
    finally:
        holder.close()
    got: Counter[tuple[Any, ...]] = Counter()
    for r in results:
        rows = _file_rows(r.path.removeprefix("file://"))
        assert len(rows) == r.rows > 0
        got.update(rows)
    want = Counter({(rid, v, payload, arr, _days(d)): n
                    for (rid, v, payload, arr, d), n in expected.items()})
    assert got == want
    assert sum(r.rows for r in results) == 3000
    assert all(n == 1 for n in got.values())
    assert max(len(p or "") for _, _, p, _, _ in got) == 120 * 32  # the TOASTed values


def _days(d: str) -> int:
    y, m, day = (int(x) for x in d.split("-"))
    return (dt.date(y, m, day) - dt.date(1970, 1, 1)).days


def test_value_longer_than_a_csv_block_takes_the_text_path(
        pg: LocalPostgres, database: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """TOASTed values of 3,840 bytes against a CSV block of 2,048: the parser stops at the
    first (after writing the rows before it); the chunk is copied again through the text
    format into the same file, which then holds every row once — the same file the CSV path
    writes with blocks that hold the rows."""
    rel, types, schema = _setup_big(pg, database)
    converted: list[int] = []  # rows of each CSV batch converted
    from_strings = CopyRows.from_strings

    def counting(self: CopyRows, columns: Any) -> pa.Table:
        converted.append(len(columns[0]))
        return from_strings(self, columns)

    monkeypatch.setattr(CopyRows, "from_strings", counting)
    holder, snapshot = _snapshot(pg, database)
    try:
        expected = _source_rows(holder)
        files = {}
        for block in (2048, chunks.CSV_BLOCK_BYTES, 4096 + 1024):
            converted.clear()
            location = f"file://{tmp_path}/data/block-{block}.parquet"
            result = copy_chunk(_task(pg, database, rel, types, schema, snapshot, location,
                                      batch_rows=500, csv_block_bytes=block, binary=False))
            assert result.rows == 3000 and result.attempts == 1
            assert result.format == ("text" if block == 2048 else "csv"), block
            # the CSV attempt converted rows before the long one; the text path redid them all
            assert 0 < sum(converted) < 3000 if block == 2048 else sum(converted) == 3000
            files[block] = _file_rows(location.removeprefix("file://"))
    finally:
        holder.close()
    want = Counter({(rid, v, payload, arr, _days(d)): n
                    for (rid, v, payload, arr, d), n in expected.items()})
    for block, rows in files.items():
        assert Counter(rows) == want, block
    assert files[2048] == files[chunks.CSV_BLOCK_BYTES]  # in heap order, both ways


#: texts CSV must quote, or tell from NULL, and a few the text format escapes
TRICKY = ["", "\\.", '"', '""', ",", "\n", "\r", "\r\n", "a\nb", "a,b\r\nc\"d",
          "\\N", "NULL", " lead", "trail ", "\t", "\\", "\x01", "é𝄞", "\\.\n"]


@pytest.mark.parametrize("table", ["tricky1", "tricky3"])
def test_text_quoting_round_trips(pg: LocalPostgres, database: str, tmp_path: Path,
                                 table: str, copy_reader: str) -> None:
    """Text values COPY's CSV must quote (commas, quotes, CR and LF inside values), the empty
    string against NULL, and — in a one-column table — the lines CSV treats specially: a
    NULL-only row is an empty line, ``\\.`` alone is quoted. The binary and CSV paths write
    what the text path writes, and all three what the table holds."""
    cols = "t text" if table == "tricky1" else "id int, t text, v varchar(20)"
    with pg.connect(database) as conn:
        conn.execute(f"CREATE TABLE {table} ({cols})")
        with conn.cursor() as cur:
            for i, value in enumerate([*TRICKY, None, None]):
                row = (value,) if table == "tricky1" else (i, value, value and value[:20])
                marks = ", ".join(["%s"] * len(row))
                cur.execute(f"INSERT INTO {table} VALUES ({marks})", row)
    rel, types, schema = _installed(pg, database, table)
    holder, snapshot = _snapshot(pg, database)
    try:
        want = Counter(holder.execute(f"SELECT * FROM {table}").fetchall())
        results = {}
        for fmt, change in (("binary", {}), ("csv", {"binary": False}),
                            ("text", {"csv_block_bytes": 0})):
            location = f"file://{tmp_path}/data/{table}-{fmt}.parquet"
            results[fmt] = copy_chunk(_task(pg, database, rel, types, schema, snapshot,
                                            location, batch_rows=4, **change))
    finally:
        holder.close()
    # the psycopg reader has no binary format: CSV instead
    assert [r.format for r in results.values()] == [
        "binary" if copy_reader == "compiled" else "csv", "csv", "text"]
    for result in results.values():
        data = pq.read_table(result.path.removeprefix("file://"))
        names = [c.column.name for c in LayoutCache(types).get(rel).live]
        got = Counter(zip(*(data.column(n).to_pylist() for n in names), strict=True))
        assert got == want
        assert result.rows == len(TRICKY) + 2


def test_empty_chunk_writes_a_valid_empty_file(pg: LocalPostgres, database: str,
                                               tmp_path: Path) -> None:
    rel, types, schema = _setup_big(pg, database)
    holder, snapshot = _snapshot(pg, database)
    try:
        location = f"file://{tmp_path}/data/empty.parquet"
        result = copy_chunk(_task(pg, database, rel, types, schema, snapshot, location,
                                  first=1_000_000, end=None))
    finally:
        holder.close()
    assert result.rows == 0 and result.counts_only == []
    data = pq.read_table(location.removeprefix("file://"))
    assert data.num_rows == 0
    assert [f.name for f in data.schema] == [f.name for f in schema.fields]


def test_failure_names_the_chunk_never_the_password(pg: LocalPostgres, database: str,
                                                    tmp_path: Path, copy_reader: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "RETRY_BACKOFF_S", 0.0)
    rel, types, schema = _setup_big(pg, database)
    location = f"file://{tmp_path}/data/failed.parquet"
    dsn = pg.dsn(database) + " password=s3cr3t-Pw"  # trust auth: accepted, and ignored
    task = _task(pg, database, rel, types, schema, "00000003-0000001B-1", location,
                 index=4, first=10, end=20, attempts=2, dsn=dsn)
    with pytest.raises(SourceError) as info:
        copy_chunk(task)
    msg = str(info.value)
    assert "s3cr3t" not in msg and "\n" not in msg
    assert re.search(r"public\.big chunk 4 \(blocks 10\.\.20\).* 2 attempt", msg), msg
    assert f"127.0.0.1:{pg.port}/{database}" in msg
    assert "snapshot" in msg  # the server's reason: the snapshot does not exist
    assert not Path(location.removeprefix("file://")).exists()


def test_compiled_reader_gives_copy_output_in_blocks(pg: LocalPostgres, database: str) -> None:
    """CopyOut.read: every byte psycopg's COPY gives, rows split across blocks of any size,
    the row count at the end, b"" after it; a refused statement raises one line with the
    server's reason; close() ends the session, a COPY half read with it."""
    copyout = chunks._copyout
    assert copyout is not None, "cdclake.snapshot._copyout was not built"
    pg.sql("CREATE TABLE blocks AS SELECT i, repeat('x', i % 50) AS t, "
           "CASE WHEN i % 3 = 0 THEN NULL ELSE 'a,\"b\"\nc' END AS q "
           "FROM generate_series(1, 5000) i", database)
    statement = "COPY blocks TO STDOUT WITH (FORMAT csv)"
    with pg.connect(database) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        want = b"".join(bytes(row) for row in copy)
    params = {"dbname": pg.dsn(database), "application_name": "cdclake-copyout-test"}
    for size in (7, 4096, 1 << 20):
        with copyout.CopyOut(params) as session:
            session.execute("SET TimeZone = 'UTC'")
            session.start(statement)
            got = []
            while block := session.read(size):
                got.append(block)
            assert b"".join(got) == want, size
            assert all(len(b) == size for b in got[:-1])  # short only at the end
            assert session.rows == 5000 and session.read(size) == b""
    with copyout.CopyOut(params) as session:
        with pytest.raises(copyout.CopyOutError, match=r"relation .*nosuch.* does not exist"):
            session.start("COPY nosuch TO STDOUT")
        session.start(statement)
        assert session.read(100)
    # the half-read COPY's session is gone with close()
    deadline = time.monotonic() + 10
    while pg.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                 "'cdclake-copyout-test'", database)[0][0]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(copyout.CopyOutError) as info:
        copyout.CopyOut({"dbname": pg.dsn(database), "port": "1"})
    assert "\n" not in str(info.value) and str(info.value)


def test_binary_values_without_a_stream_value_are_null_plus_their_text(
        pg: LocalPostgres, database: str, tmp_path: Path) -> None:
    """NaN in a numeric(p, s), ±infinity, BC and a timestamp past Arrow's range (year
    294,276) in the binary format: the stream's infinity values, NULL plus the text the
    codec prints for the others — the file the CSV path writes."""
    pg.sql("CREATE TABLE far (id int PRIMARY KEY, ts timestamp, tz timestamptz, d date, "
           "n numeric(10,2))", database)
    pg.sql("INSERT INTO far VALUES (1, '2024-01-01 10:00:00.5', '2024-01-01 10:00+02', "
           "'2024-01-01', 'NaN'), (2, 'infinity', '-infinity', '-infinity', 1.5), "
           "(3, '0044-03-15 10:00:00 BC', '0044-03-15 10:00:00+00 BC', '0044-03-15 BC', NULL),"
           " (4, NULL, NULL, NULL, -99999999.99), (5, '294276-12-31 23:59:59', "
           "'294276-12-31 23:59:59.999999+00', '5874897-12-31', 2)", database)
    rel, types, schema = _installed(pg, database, "far")
    holder, snapshot = _snapshot(pg, database)
    try:
        files, formats = {}, []
        for fmt, change in (("binary", {}), ("csv", {"binary": False})):
            location = f"file://{tmp_path}/data/far-{fmt}.parquet"
            formats.append(copy_chunk(_task(pg, database, rel, types, schema, snapshot,
                                            location, batch_rows=2, **change)).format)
            files[fmt] = pq.read_table(location.removeprefix("file://"))
    finally:
        holder.close()
    assert formats == ["binary", "csv"]
    assert files["binary"].equals(files["csv"])
    texts = [dict(t or []) for t in files["binary"].column(CDC_PG_TEXT).to_pylist()]
    assert texts[0] == {"5": "NaN"}
    assert texts[4] == {"2": "294276-12-31 23:59:59", "3": "294276-12-31 23:59:59.999999+00"}


def test_compiled_reader_refuses_what_a_kind_cannot_hold(pg: LocalPostgres,
                                                        database: str) -> None:
    """read_binary against the server's real binary output: a numeric beyond the decimal's
    precision raises NotPlain (the chunk then gives way to CSV), a value of another width
    than its kind Malformed (the same, with a warning) — never a wrong value."""
    copyout = chunks._copyout
    assert copyout is not None, "cdclake.snapshot._copyout was not built"
    kind = copyout.Kind
    pg.sql("CREATE TABLE odd (n numeric(10,2), b int8)", database)
    pg.sql("INSERT INTO odd VALUES (1.5, 1), (12345678.91, 2)", database)
    statement = "COPY odd TO STDOUT WITH (FORMAT binary)"
    with copyout.CopyOut({"dbname": pg.dsn(database)}) as session:
        session.start(statement)
        rows, columns, specials = session.read_binary(
            [(int(kind.K_NUMERIC), 10, 2), (int(kind.K_INT64), 0, 0)], 10, 1 << 20)
        assert rows == 2 and specials == [] and len(columns) == 2
        values = pa.Array.from_buffers(pa.decimal128(10, 2), 2,
                                       [None, pa.py_buffer(columns[0][0])])
        assert values.to_pylist() == [Decimal("1.50"), Decimal("12345678.91")]
    # beyond the precision (12345678.91 in 4 digits), finer than the scale (.91 in 1)
    for precision, scale in ((4, 2), (10, 1)):
        with copyout.CopyOut({"dbname": pg.dsn(database)}) as session:
            session.start(statement)
            with pytest.raises(copyout.NotPlain) as info:
                session.read_binary([(int(kind.K_NUMERIC), precision, scale),
                                     (int(kind.K_INT64), 0, 0)], 10, 1 << 20)
            assert info.value.args == (0,)
    with copyout.CopyOut({"dbname": pg.dsn(database)}) as session:
        session.start(statement)
        with pytest.raises(copyout.Malformed, match="column 2"):
            session.read_binary([(int(kind.K_NUMERIC), 10, 2), (int(kind.K_INT32), 0, 0)], 10,
                                1 << 20)


def test_binary_batches_are_bounded_in_bytes(pg: LocalPostgres, database: str,
                                             tmp_path: Path) -> None:
    """Rows with TOASTed values of 3,840 bytes among them against a 40 kB batch bound:
    batches (row groups) of about a hundred rows, not batch_rows' 500 — a task's memory does
    not grow with its rows' size — and every row once, as the CSV path writes them."""
    rel, types, schema = _setup_big(pg, database)
    holder, snapshot = _snapshot(pg, database)
    try:
        files = {}
        for fmt, change in (("binary", {"batch_bytes": 40_000}), ("csv", {"binary": False})):
            location = f"file://{tmp_path}/data/bytes-{fmt}.parquet"
            result = copy_chunk(_task(pg, database, rel, types, schema, snapshot, location,
                                      batch_rows=500, **change))
            assert result.format == fmt and result.rows == 3000
            files[fmt] = location.removeprefix("file://")
    finally:
        holder.close()
    meta = pq.ParquetFile(files["binary"]).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 3000 and max(sizes) < 500 and len(sizes) > 3000 // 500
    assert _file_rows(files["binary"]) == _file_rows(files["csv"])
