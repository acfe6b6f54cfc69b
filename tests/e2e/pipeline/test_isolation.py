"""One table never stops the others, as a user meets it: ``cdclake run`` as a real process on
PostgreSQL 15, a local store, the SQLite catalog and a local Spark; mirrors read back with
DuckDB.

One stream lives through the module. ``public.secret`` is in CDCLAKE_EXCLUDE_TABLES: never
copied, decoded or merged. ``public.cubes`` has a ``cube`` column (contrib), a type whose
output function cdclake does not know: its initial snapshot copies the server's text, and
the first change of it after the snapshot quarantines that table alone, until the column is
made ``text`` and ``cdclake snapshot --tables`` copies it again. ``public.accounts``' mirror
is made incompatible by hand through pyiceberg (a column cdclake cannot tie to the source):
its merge fails run after run — on the pyiceberg merge, then on the Spark one — while
``public.events`` commits every batch; the runs exit 2 with one line naming it, write their
report, leave the batches pending, and the first run after the column is dropped again
catches the table up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.table import Table
from pyiceberg.types import StringType

from cdclake.archive import Layout, open_store
from cdclake.lake.catalog import open_catalog
from cdclake.lake.pending import list_batches
from cdclake.lake.tables import mirror_identifier
from tests.e2e.pipeline.test_faults import Stream, bank_stream
from tests.e2e.pipeline.test_snapshot_cli import (
    PASSWORD,
    archive_all,
    cdclake,
    mirror_rows,
    ok,
    one_error_line,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TABLES = {"public.accounts": ["id", "owner", "n"], "public.events": ["id", "kind"],
          "public.cubes": ["id", "c"]}
SCHEMA = [
    "CREATE EXTENSION cube",
    "CREATE TABLE accounts (id int PRIMARY KEY, owner text, n int)",
    "INSERT INTO accounts SELECT g, 'owner ' || g, 0 FROM generate_series(1, 50) g",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text)",
    "CREATE TABLE cubes (id int PRIMARY KEY, c cube)",
    "INSERT INTO cubes VALUES (1, '(1, 2)'), (2, '(0),(1.5)'), (3, NULL)",
    "CREATE TABLE secret (id int PRIMARY KEY, v text)",
    "INSERT INTO secret VALUES (1, 'before')",
]


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stream]:
    with bank_stream(tmp_path_factory.mktemp("mixed"), SCHEMA,
                     CDCLAKE_EXCLUDE_TABLES="public.secret") as s:
        archive_all(s.pg, s.database)
        yield s


def changes(stream: Stream) -> None:
    """A round of changes on accounts, events and secret, archived."""
    stream.round += 1
    r = stream.round
    stream.sql(f"UPDATE accounts SET n = n + {r}, owner = owner || '.' WHERE id % 4 = {r % 4}")
    stream.sql(f"INSERT INTO accounts VALUES ({1000 + r}, 'round {r}', {r})")
    stream.sql(f"INSERT INTO events SELECT {r} * 1000 + g, 'round {r}' "
               "FROM generate_series(1, 30) g")
    stream.sql(f"DELETE FROM events WHERE id % 7 = {r}")
    stream.sql(f"INSERT INTO secret VALUES ({r + 1}, 'round {r}')")
    archive_all(stream.pg, stream.database)


def run(stream: Stream, run_id: str, **env: str) -> Any:
    return cdclake({**stream.env, **env}, "run", "--run-id", run_id)


def report(stdout: str) -> dict[str, Any]:
    """The run report the run named on stdout (also when the run failed)."""
    line = next(x for x in stdout.splitlines() if x.startswith("report: "))
    text = Path(line.removeprefix("report: ")).read_text()
    assert PASSWORD not in text
    return json.loads(text)  # type: ignore[no-any-return]


def equal(stream: Stream, *tables: str) -> None:
    stream.assert_mirrors_equal({t: TABLES[t] for t in tables})


def mirror_of(stream: Stream, table: str) -> Table:
    config = stream.config
    return open_catalog(config).load_table(mirror_identifier(config, *table.split(".")))


def test_an_excluded_table_is_never_copied_decoded_or_merged(stream: Stream) -> None:
    out = ok(run(stream, "first"))
    result = report(out.stdout)
    copied = {t["table"] for t in result["steps"]["snapshot"]["tables"]}
    assert copied == set(TABLES)  # cubes too: COPY prints its values, they are kept as text
    equal(stream, *TABLES)
    changes(stream)
    ok(run(stream, "second"))
    equal(stream, "public.accounts", "public.events")
    assert mirror_rows(stream.config, "public.secret", ["id"]) is None
    decoded = list_batches(open_store(stream.config), Layout())
    assert decoded and all("public.secret" not in [t["table"] for t in b.manifest["tables"]]
                           for b in decoded)
    assert any("public.events" in [t["table"] for t in b.manifest["tables"]] for b in decoded)
    refused = one_error_line(cdclake(stream.env, "snapshot", "--tables", "public.secret"),
                             "snapshot")
    assert "public.secret: in CDCLAKE_EXCLUDE_TABLES" in refused


def test_a_value_cdclake_cannot_print_and_a_failing_merge_stop_no_other_table(
        stream: Stream) -> None:
    """A cube changes (quarantine) and accounts' mirror gets a column by hand (its merge
    fails): events commits; the run exits 2 naming accounts, its report says everything,
    ``cdclake status`` shows the quarantine and the batch left pending."""
    with mirror_of(stream, "public.accounts").update_schema() as update:
        update.add_column("by_hand", StringType())
    stream.sql("UPDATE cubes SET c = '(5, 6)' WHERE id = 1")
    stream.sql("INSERT INTO cubes VALUES (4, '(7)')")
    changes(stream)
    out = run(stream, "failing")
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert last.startswith("cdclake run: error: the merge of 1 table(s) failed: "
                           "public.accounts (batch "), last
    assert "'by_hand'" in last and "the next run retries it" in last
    merge_line = next(x for x in out.stderr.splitlines() if x.startswith("merge: "))
    assert "FAILED (retried by the next run): public.accounts" in merge_line
    assert "QUARANTINED public.cubes: column c (attnum 2)" in merge_line
    result = report(out.stdout)
    merge = result["steps"]["merge"]
    assert [f["table"] for f in merge["failed"]] == ["public.accounts"]
    assert [q["table"] for q in merge["quarantined"]] == ["public.cubes"]
    assert result["mirrors"]["public.cubes"]["quarantined"].startswith("column c (attnum 2)")
    equal(stream, "public.events")
    assert len(mirror_rows(stream.config, "public.cubes", ["id"]) or []) == 3  # as copied
    status = ok(cdclake(stream.env, "status")).stdout
    assert "waiting for merge: 1" in status, status
    assert "public.cubes -> cdc.public__cubes" in status and "QUARANTINED: column c" in status

    # the next batch, on the Spark merge, each batch merged apart: accounts still fails and
    # is held back from the second, events commits both batches
    changes(stream)
    out = run(stream, "failing-on-spark", CDCLAKE_MERGE_ENGINE="spark",
              CDCLAKE_MERGE_MAX_ROWS="1")
    assert out.returncode == 2 and "public.accounts" in out.stderr.strip().splitlines()[-1]
    merge = report(out.stdout)["steps"]["merge"]
    assert [(f["table"], f["batch"]) for f in merge["failed"]] == \
        [("public.accounts", merge["batches"][0]["batch"])]
    assert merge["batches"][1]["held_back"] == ["public.accounts"]
    assert [t["engine"] for b in merge["batches"] for t in b["tables"]
            if t["table"] == "public.events"] == ["spark", "spark"]
    equal(stream, "public.events")


def test_the_next_runs_catch_up_once_the_causes_are_gone(stream: Stream) -> None:
    """The column dropped from accounts' mirror, and cubes' column made text in the source
    and the table copied again: the next run merges the pending batches into accounts, and
    cubes follows the stream again."""
    with mirror_of(stream, "public.accounts").update_schema() as update:
        update.delete_column("by_hand")
    stream.sql("ALTER TABLE cubes ALTER COLUMN c TYPE text USING c::text")
    out = ok(cdclake(stream.env, "snapshot", "--tables", "public.cubes"))
    assert "public.cubes -> cdc.public__cubes" in out.stdout
    assert "quarantine" not in json.dumps(dict(mirror_of(stream, "public.cubes").properties))
    stream.sql("UPDATE cubes SET c = 'now text' WHERE id = 2")
    changes(stream)
    out = ok(run(stream, "caught-up"))
    merge = report(out.stdout)["steps"]["merge"]
    assert merge["failed"] == [] and merge["quarantined"] == []
    equal(stream, *TABLES)
    status = ok(cdclake(stream.env, "status")).stdout
    assert "waiting for merge: 0" in status and "QUARANTINED" not in status
