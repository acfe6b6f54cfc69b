"""A workload through the whole pipeline — ship, Spark decode, merge — compared with
PostgreSQL twice: the change stream with a ``test_decoding`` slot, line for line, and every
Iceberg mirror (read with DuckDB) with its source table, row for row.

The workload's setup runs after the slot is created (unlike the decoding oracle, where it
runs before): a mirror holds what the stream brought, so every row a table has must have
been written while the stream was watching. The WAL is switched to a new segment after every
step, and batches end at several of those segment boundaries, so transactions stay open
across batch cuts; a tiny ``work_mem`` makes every partition spill. Run in one go, a workload
creates each mirror in the batch that first changes its table, with the table's schema as of
that batch's end; run in phases (:func:`run_phases`, ``mirrors_first``), its tables are made
and filled, and merged, before its DDL runs on them, as in production.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdclake.archive import open_store
from cdclake.archive.layout import Layout
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.install import install
from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from cdclake.lake.inexact import inexact_of
from cdclake.lake.pending import list_batches, open_batch
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.pipeline import steps
from cdclake.pipeline.params import RunParams
from cdclake.stream.progress import load_progress
from tests.oracle.decoding.harness import Step, archive_all, oracle, run_steps
from tests.oracle.pipeline import render
from tests.support import duck

#: batches per workload: the segments are cut into this many runs of ``cdclake run``
BATCHES = 3
#: reorder-buffer memory per Spark partition: every transaction with a few rows spills
WORK_MEM = 4096


@dataclass
class PipelineRun:
    database: str
    slot: str
    start_lsn: int
    config: Config
    read_from: int = 0  #: an LSN before the install: where a decoder of this WAL starts
    key: bytes = b""  #: the install's signing key
    end_lsn: int = 0  #: the end of the last archived segment
    slot_lines: list[str] = field(default_factory=list)  #: the slot's rows, as they are
    expected: list[str] = field(default_factory=list)  #: the slot, projected (see below)
    actual: list[str] = field(default_factory=list)  #: the change stream, rendered
    merges: list[dict[str, Any]] = field(default_factory=list)
    #: per decoded batch: its step result and how many transactions it left open
    decodes: list[tuple[dict[str, Any], int]] = field(default_factory=list)

    @property
    def cut_open(self) -> int:
        """Transactions left open at a batch cut (carried to the next batch), summed."""
        return sum(n for _, n in self.decodes[:-1])

    @property
    def spilled(self) -> int:
        """Transactions the Spark partitions serialized to disk, summed over batches."""
        return sum(d.get("stats", {}).get("spilled_txns", 0) for d, _ in self.decodes)


def run_workload(pg: LocalPostgres, database: str, steps_: Sequence[Step], spark: Any,
                 work: Path, *, setup: Sequence[str] = (), batches: int = BATCHES,
                 roles: Mapping[str, str] | None = None, mirrors_first: bool = False,
                 merge_engine: str = "pyiceberg") -> PipelineRun:
    """A workload of the decoding oracle (its setup too, after the slot) through the pipeline,
    with a WAL switch after every step; ``roles``: the role each session runs as (else the
    superuser). With ``mirrors_first`` what comes before the workload's first DDL
    (:func:`split_at_ddl`) is merged before the DDL runs: it meets mirrors that exist.
    ``merge_engine``: as :func:`run_phases` says."""
    all_steps = [("setup", sql) for sql in setup] + list(steps_)

    def act(part: Sequence[Step]) -> None:
        with pg.connect(database) as switcher:
            run_steps(pg, database, part, roles=roles,
                      after=lambda: switcher.execute("SELECT pg_switch_wal()"))

    parts = split_at_ddl(all_steps) if mirrors_first else [all_steps]
    return run_phases(pg, database, [functools.partial(act, p) for p in parts], spark, work,
                      batches=batches, merge_engine=merge_engine)


#: the statements that change a table's definition or storage
DDL = frozenset({"ALTER", "VACUUM", "CLUSTER", "REFRESH", "DROP"})
#: a statement's end in a step of several (the workloads end each one at a line's end)
STATEMENT_END = re.compile(r";[ \t]*(?:\n|$)")


def split_at_ddl(steps_: Sequence[Step]) -> list[list[Step]]:
    """``[before, rest]``: the steps before the first statement in :data:`DDL`, and the
    others. A step of several statements is cut between two of them; a cut that would fall
    inside a session's transaction block moves back to its BEGIN."""
    statements = [(i, session, sql) for i, (session, text) in enumerate(steps_)
                  for sql in (s.strip() for s in STATEMENT_END.split(text)) if sql]
    open_at: dict[str, int] = {}  # session -> where its open transaction block began
    cut = None
    for k, (_, session, sql) in enumerate(statements):
        word = sql.split(None, 1)[0].upper()
        if word in DDL:
            cut = min([k, *open_at.values()])
            break
        if word in ("BEGIN", "START"):
            open_at[session] = k
        elif word in ("COMMIT", "END") or (word == "ROLLBACK" and " TO " not in sql.upper()):
            open_at.pop(session, None)
    assert cut, "the workload writes nothing before its first DDL: no mirror would meet it"

    def steps_of(part: list[tuple[int, str, str]]) -> list[Step]:
        out: list[Step] = []
        for _, group in itertools.groupby(part, key=lambda s: s[0]):
            rows = list(group)
            out.append((rows[0][1], ";\n".join(sql for _, _, sql in rows)))
        return out

    return [steps_of(statements[:cut]), steps_of(statements[cut:])]


def run_action(pg: LocalPostgres, database: str, action: Callable[[], None], spark: Any,
               work: Path, *, batches: int = BATCHES) -> PipelineRun:
    """Everything up to the comparisons: ``action`` writes to the source while a slot
    watches; then ship, decode in ``batches`` Spark batches, merge."""
    return run_phases(pg, database, [action], spark, work, batches=batches)


def run_phases(pg: LocalPostgres, database: str, phases: Sequence[Callable[[], None]],
               spark: Any, work: Path, *, batches: int = BATCHES,
               merge_engine: str = "pyiceberg") -> PipelineRun:
    """:func:`run_action` for ``phases`` run one after the other, the WAL of each shipped,
    decoded (in up to ``batches`` batches), validated and merged before the next begins: what
    a phase writes meets mirrors the earlier phases made. The stream alone fills them
    (``snapshot_mode = "never"``, and the steps never snapshot). With ``merge_engine`` spark,
    ``spark`` must be the session :func:`cdclake.sparkenv.session.session` made for a
    configuration whose home is ``work / "home"`` (the merge's session is the same one)."""
    pg.sql("SELECT pg_switch_wal()", database)
    pg.sql("CHECKPOINT", database)  # a running-xacts record early in the first segment
    first, read_from = pg.sql(
        "SELECT pg_walfile_name(pg_current_wal_lsn()), pg_current_wal_lsn()::text", database)[0]
    key = install(pg.dsn(database)).key
    slot = f"pipe_{database}"
    start = parse_lsn(pg.sql(
        "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'test_decoding')",
        database, (slot,))[0][0])
    config = Config(home=work / "home", source_dsn=pg.dsn(database),
                    archive_dir=work / "archive", store_url=(work / "store").as_uri(),
                    work_mem=WORK_MEM, spill_dir=work / "spill", spark_master="local[2]",
                    spark_partitions=2, snapshot_mode="never", merge_engine=merge_engine)
    run = PipelineRun(database, slot, start, config, parse_lsn(read_from), key)
    decoded: list[str] = []  # the segments decoded so far
    try:
        for i, action in enumerate(phases):
            action()
            # WAL after the last switch, so that archive_all's switch finishes a segment (a
            # switch right after another is a no-op); the stream carries no messages, the
            # slot's are projected away
            pg.sql("SELECT pg_logical_emit_message(false, 'cdclake.oracle', %s)", database,
                   (f"end of phase {i}",))
            run.end_lsn = archive_all(pg, database)
            if i < len(phases) - 1:
                _ship_to_merge(pg, run, first, decoded, spark, batches)
        run.slot_lines = oracle(pg, _Cap(database, slot))
        parents = frozenset(name for (name,) in pg.sql(PARENTS, database))
        run.expected = project_slot(run.slot_lines, parents)
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (slot,))
    _ship_to_merge(pg, run, first, decoded, spark, batches)
    run.actual = stream_text(config)
    return run


def _ship_to_merge(pg: LocalPostgres, run: PipelineRun, first: str, decoded: list[str],
                   spark: Any, batches: int) -> None:
    """Ship what the cluster archived from ``first`` on, decode the segments not in
    ``decoded`` (appended to it) in ``batches`` Spark batches, validate them, merge."""
    config = run.config
    assert config.archive_dir is not None
    segments = [s for s in copy_segments(pg.archive_dir, config.archive_dir, first)
                if s not in decoded]
    steps.ship(config)
    store = open_store(config)
    for until in _cuts(segments, batches):
        result = steps.decode(config, RunParams(until_segment=until, start_lsn=run.start_lsn),
                              spark=spark)
        progress = load_progress(store, Layout())
        run.decodes.append((result, len(progress.open_txns) if progress else 0))
    decoded += segments
    steps.validate_stream(config)  # the merge takes validated batches only
    run.merges.append(steps.merge(config))


@dataclass
class _Cap:
    """What harness.oracle needs to peek at a slot."""

    database: str
    slot: str


def copy_segments(source: Path, target: Path, first: str) -> list[str]:
    """The cluster's archived segments from ``first`` on (its archive holds every test's),
    copied to ``target`` if not there yet; all their names."""
    target.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in source.iterdir()
                   if len(p.name) == 24 and p.name[8:] >= first[8:])
    for name in names:
        if not (target / name).exists():
            shutil.copy2(source / name, target / name)
    return names


def _cuts(segments: list[str], batches: int) -> list[str]:
    """The last segment of each batch: ``batches`` runs of about equal length."""
    n = len(segments)
    ends = sorted({max(0, (n * (i + 1)) // batches - 1) for i in range(batches)})
    return [segments[i] for i in ends]


# -- the slot's side -----------------------------------------------------------------------


#: partitioned tables, as a slot names them: they have no rows, so no mirror
#: the partitioned tables, every name qualified: the hostile-role suite leaves shadows of
#: ``quote_ident`` and ``||`` where a superuser's default search path finds them
PARENTS = """
SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.'
       OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n
  ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.relkind OPERATOR(pg_catalog.=) 'p'
"""


def project_slot(lines: list[str], parents: frozenset[str] = frozenset()) -> list[str]:
    """The slot's output as the change stream can show it: table changes only.

    The stream carries no logical messages (``cdclake.ddl`` ones shaped the dictionary, the
    others are not table changes) and no TRUNCATE options; a TRUNCATE of several tables is
    one row per table there, so it becomes one ``TRUNCATE <table>`` line per table, sorted,
    but for the partitioned ``parents`` it names (rows are their partitions'). Transactions
    left without a line are dropped, as ``skip-empty-xacts`` would.
    """
    out: list[str] = []
    txn: list[str] = []
    begin = ""
    for line in lines:
        if line.startswith("BEGIN"):
            begin, txn = line, []
        elif line.startswith("COMMIT"):
            if txn:
                out += [begin, *txn, line]
            begin, txn = "", []
        elif line.startswith("message:"):
            continue
        elif ": TRUNCATE:" in line:
            names = line[len("table "):line.index(": TRUNCATE:")].split(", ")
            txn += [f"TRUNCATE {n}" for n in sorted(names) if n not in parents]
        else:
            txn.append(line)
    return out


# -- the stream's side ---------------------------------------------------------------------


def final_dictionary(config: Config) -> Dictionary:
    store = open_store(config)
    progress = load_progress(store, Layout())
    assert progress is not None, "no batch was decoded"
    return Dictionary.from_json(json.loads(store.get(progress.dictionary_key)))


def stream_text(config: Config) -> list[str]:
    """Every batch's change rows as test_decoding lines, framed by BEGIN/COMMIT per commit."""
    store = open_store(config)
    types = final_dictionary(config).types
    keyed: list[tuple[tuple[int, int, int, int, str], str]] = []
    for decoded in list_batches(store, Layout()):
        batch = open_batch(config, store, Layout(), decoded)
        for entry in batch.entries:
            changes = batch.load(entry)
            for version in changes.versions:
                rel = version.relation
                for key, line in render.stream_lines(rel, version.changes,
                                                     types.at(rel.valid_from)):
                    keyed.append(((*key, line if line.startswith("TRUNCATE") else ""), line))
    keyed.sort(key=lambda kv: kv[0])
    out: list[str] = []
    current: tuple[int, int] | None = None
    for (commit, xid, _lsn, _seq, _t), line in keyed:
        if current != (commit, xid):
            if current is not None:
                out.append(f"COMMIT {current[1]}")
            out.append(f"BEGIN {xid}")
            current = (commit, xid)
        out.append(line)
    if current is not None:
        out.append(f"COMMIT {current[1]}")
    return out


# -- mirrors against their source tables ---------------------------------------------------


@dataclass
class TableDiff:
    table: str
    missing: list[tuple[Any, ...]]  #: source rows the mirror lacks (multiset difference)
    extra: list[tuple[Any, ...]]  #: mirror rows the source lacks
    note: str = ""
    accepted: bool = False  #: the merge reported changes it could not apply (no identity)


SOURCE_TABLES = """
SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'cdclake', 'pg_toast')
ORDER BY 2, 3
"""

COLUMNS = """
SELECT attname FROM pg_attribute
WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped {generated}
ORDER BY attnum
"""

SESSION = ("SET TimeZone = 'UTC'", "SET DateStyle = 'ISO, YMD'",
           "SET IntervalStyle = 'postgres'", "SET extra_float_digits = 1",
           "SET bytea_output = 'hex'")


def compare_mirrors(pg: LocalPostgres, run: PipelineRun) -> tuple[list[TableDiff], list[str]]:
    """Each source table's rows (as their output functions print them) against its mirror's
    (read with DuckDB, rendered to the same text), as multisets. Returns the differences and
    the tables whose differences are accepted because the merge reported changes it could not
    apply (no replica identity) and marked their mirrors inexact."""
    dictionary = final_dictionary(run.config)
    catalog = open_catalog(run.config)
    unappliable = {t["table"] for m in run.merges for b in m["batches"] for t in b["tables"]
                   if t["identity_nothing"]}
    diffs: list[TableDiff] = []
    con = duck.connect()
    generated = "AND attgenerated <> 'v'" if pg.version >= 18 else ""
    with pg.connect(run.database) as conn:
        for sql in SESSION:
            conn.execute(sql)
        for oid, schema, name in conn.execute(SOURCE_TABLES).fetchall():
            cols = [r[0] for r in conn.execute(COLUMNS.format(generated=generated),
                                               (oid,)).fetchall()]
            # format('%s', v) prints with the type's output function, as the stream's text
            # does (a cast to text does not always: boolean, char(n), inet); num_nulls asks
            # whether the value is NULL (IS NULL is true of a composite of NULLs too)
            select = ", ".join(
                f"""CASE WHEN num_nulls("{c}") = 1 THEN NULL ELSE format('%s', "{c}") END"""
                for c in (x.replace('"', '""') for x in cols))
            source = Counter(tuple(r) for r in conn.execute(
                f'SELECT {select} FROM "{schema}"."{name}"').fetchall())
            ident = mirror_identifier(run.config, schema, name)
            table = f"{schema}.{name}"
            absent: list[str] = []
            marked = False
            if catalog.table_exists(ident):
                stored = catalog.load_table(ident)
                marked = inexact_of(stored.properties) is not None
                data = duck.read_table(stored, con)
                absent = [c for c in cols if c not in data.column_names]
                mirror = Counter(mirror_rows(data, cols, _latest(dictionary, oid),
                                             dictionary.types))
            else:
                mirror = Counter()
            if absent and source:
                diffs.append(TableDiff(table, [], [], f"columns missing from the mirror: "
                                                     f"{absent}"))
            elif source != mirror:
                # only a difference the mirror itself declares (cdclake.lake.inexact), for
                # changes the merge reported it could not apply
                accepted = table in unappliable and marked
                note = ("accepted: no replica identity, the mirror marked inexact" if accepted
                        else "the merge reported changes it could not apply, but the mirror "
                        "is not marked inexact" if table in unappliable else "")
                diffs.append(TableDiff(table, sorted((source - mirror).elements(), key=repr),
                                       sorted((mirror - source).elements(), key=repr),
                                       note, accepted))
    con.close()
    return diffs, sorted(unappliable)


def _latest(dictionary: Dictionary, oid: int) -> RelationVersion:
    found = dictionary.relation_for_oid(oid, 2**64 - 1)
    assert found is not None, f"relation {oid} is not in the stream's dictionary"
    return found


def mirror_rows(table: pa.Table, columns: list[str], rel: RelationVersion,
                types: Mapping[int, TypeInfo]) -> list[tuple[str | None, ...]]:
    """A mirror's rows as the source's output functions print them (columns by name)."""
    by_name = {c.name: c for c in rel.live_columns()}
    data = render.integer_view(table)
    fns = {}
    for c in columns:
        if c in data.column_names and c in by_name:
            fns[c] = render.text_function(table.schema.field(c).type,
                                          types[by_name[c].type_oid], types)
    has_pg_text = render.PG_TEXT in data.column_names
    out = []
    for row in data.to_pylist():
        exact = dict(row[render.PG_TEXT] or []) if has_pg_text else {}
        values = []
        for c in columns:
            col = by_name.get(c)
            if col is not None and str(col.attnum) in exact:
                values.append(exact[str(col.attnum)])
            elif c not in fns or row[c] is None:
                values.append(None)
            else:
                values.append(fns[c](row[c]))
        out.append(tuple(values))
    return out


def describe(diffs: list[TableDiff], limit: int = 8) -> str:
    lines = []
    for d in diffs:
        note = f"; {d.note}" if d.note else ""
        lines.append(f"{d.table}: {len(d.missing)} source rows missing from the mirror, "
                     f"{len(d.extra)} mirror rows not in the source{note}")
        lines += [f"  - {r}" for r in d.missing[:limit]]
        lines += [f"  + {r}" for r in d.extra[:limit]]
    return "\n".join(lines)
