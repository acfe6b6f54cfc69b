"""``cdclake init``: the configuration a first run needs, and the lines to give PostgreSQL.

A new user has three things to get right before anything runs: where cdclake keeps its state
(the home, which otherwise is ``.cdclake`` in whatever directory a command runs in), where the
WAL goes (the store, which the server's user writes and the runner reads), and the
``archive_command`` that sends it there, as the server's user. ``init`` writes the first two
into one commented TOML file (mode 0600: a DSN or a key may be in it) with every path
absolute, and builds the third with :func:`cdclake.archive.command.wal_push_command`, which
probes it as the server's user and keeps S3 keys out of it (they go into a file only that user
reads). It then prints the ``ALTER SYSTEM`` lines and the first-run steps, in order.

It writes nothing else and never touches the server: the lines are for a superuser to run.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import subprocess
from pathlib import Path

from cdclake.archive import store_for_url
from cdclake.archive.command import wal_push_command
from cdclake.archive.local import LocalStore
from cdclake.config import Config
from cdclake.errors import ConfigError

#: the settings ``init`` writes, in this order, with what each is for (the file's comments)
WRITTEN = (
    ("home", "where cdclake keeps its state: catalog, warehouse, reports, logs, spill"),
    ("source_dsn", "the source database (libpq); a password is better in ~/.pgpass"),
    ("store_url", "where the WAL goes: s3://bucket/prefix or file:///absolute/dir"),
    ("s3_endpoint_url", "an S3 endpoint other than AWS's (MinIO)"),
    ("s3_region", "the S3 region"),
    ("s3_access_key_id", "S3 keys (else boto3 finds its own: instance role, ~/.aws)"),
    ("s3_secret_access_key", ""),
)
#: settings a user often changes next, written commented out with their defaults
SUGGESTED = (
    ("tables", "schema.table names to mirror (default: every table)"),
    ("merge_engine", "pyiceberg (one process) or spark (MERGE INTO, merge-on-read)"),
    ("spark_master", "where Spark runs: local[*], spark://host:7077, k8s://..., yarn"),
    ("catalog_uri", "the Iceberg catalog (default: a SQLite file in the home)"),
    ("warehouse", "where the mirrors' files go (default: warehouse/ in the home)"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="the source database (libpq connection string)")
    p.add_argument("--home", type=Path,
                   help="where cdclake keeps its state (default: CDCLAKE_HOME, else .cdclake "
                        "here), written into the file as an absolute path")
    p.add_argument("--store", help="where the WAL goes: s3://bucket/prefix or an absolute "
                                   "directory (default: store/ in the home)")
    p.add_argument("--s3-endpoint-url", help="an S3 endpoint other than AWS's (MinIO)")
    p.add_argument("--output", type=Path,
                   help="the configuration file to write (default: cdclake.toml in the home)")
    p.add_argument("--server-user",
                   help="the user PostgreSQL runs as, who runs archive_command (default: "
                        "postgres when this is root, else this user)")
    p.add_argument("--credentials", type=Path,
                   help="with S3 keys: the file only the server's user may read that "
                        "archive_command names (default: wal-push.toml beside --output when "
                        "the server runs as this user, else /etc/cdclake/<stream>-wal-push.toml)")
    p.add_argument("--force", action="store_true", help="replace an existing --output file")


def run(args: argparse.Namespace, config: Config) -> int:
    config = config.replace(**{k: v for k, v in (
        ("source_dsn", args.dsn), ("store_url", args.store),
        ("s3_endpoint_url", args.s3_endpoint_url),
        ("home", args.home and args.home.expanduser().absolute())) if v})
    if not config.source_dsn:
        raise ConfigError("give the source database: --dsn 'host=... dbname=...' "
                          "(or CDCLAKE_SOURCE_DSN)")
    config = config.replace(store_url=config.effective_store_url())
    output = (args.output or config.home / "cdclake.toml").absolute()
    if output.exists() and not args.force:
        raise ConfigError(f"{output} exists: --force replaces it, or choose --output")
    server_user = _server_user(args.server_user)
    _check_store(config, server_user)
    credentials = None
    if config.s3_secret_access_key:
        credentials = args.credentials or _default_credentials(config, output, server_user)
    config.home.mkdir(parents=True, exist_ok=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    command = wal_push_command(config, run_as=server_user, credentials=credentials)
    _write_private(output, render(config))
    print(f"wrote {output} (mode 0600)")
    if credentials is not None:
        print(f"wrote {credentials}: the store's keys, for {server_user or 'this user'} only")
    print(next_steps(output, command))
    return 0


def render(config: Config) -> str:
    """The configuration file: each written setting with its purpose, then the usual next
    ones commented out at their defaults."""
    lines = ["# cdclake's configuration (cdclake init): every command reads it when",
             "# CDCLAKE_CONFIG names it; a CDCLAKE_<NAME> variable overrides a key here.",
             "# Every key is a field of Config (cdclake/config.py), documented there.",
             "[cdclake]"]
    defaults = Config()
    for name, why in WRITTEN:
        value = getattr(config, name)
        if name != "home" and value == getattr(defaults, name):
            continue
        if why:
            lines.append(f"# {why}")
        lines.append(f"{name} = {json.dumps(str(value))}")
    lines.append("")
    for name, why in SUGGESTED:
        default = getattr(defaults, name)
        shown = json.dumps(default) if not isinstance(default, str) or default else '""'
        lines += [f"# {why}", f"# {name} = {shown}"]
    return "\n".join(lines) + "\n"


def next_steps(output: Path, command: str) -> str:
    """What to do next, in order: the runner's environment, the server's settings, the
    install, a first segment, the first run."""
    quoted = command.replace("'", "''")
    return "\n".join([
        "",
        "Next:",
        f"1. export CDCLAKE_CONFIG={output}   # every cdclake command, and Airflow's workers",
        "2. as a superuser on the source, then restart PostgreSQL (archive_mode needs it):",
        "     ALTER SYSTEM SET wal_level = logical;",
        "     ALTER SYSTEM SET archive_mode = on;",
        f"     ALTER SYSTEM SET archive_command = '{quoted}';",
        "3. cdclake source install",
        "4. on the source: SELECT pg_switch_wal();   -- archives the segment the install wrote",
        "   (or set archive_timeout: PostgreSQL archives a segment only once it is full)",
        "5. cdclake run      # copies the tables' rows, then follows their changes",
        "6. cdclake status   # and the mirrors: see \"Querying the mirrors\" in the README",
    ])


def _server_user(given: str | None) -> str | None:
    """The server's user when it is not this one (None: this one). By default ``postgres``
    when this is root and there is such a user."""
    name = given or ("postgres" if os.geteuid() == 0 else None)
    if name is None:
        return None
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        if given:
            raise ConfigError(f"--server-user: there is no user {given!r}") from None
        return None
    return None if uid == os.geteuid() else name


def _default_credentials(config: Config, output: Path, server_user: str | None) -> Path:
    if server_user is None:
        return output.with_name("wal-push.toml")
    directory = Path("/etc/cdclake")
    directory.mkdir(mode=0o755, exist_ok=True)
    return directory / f"{config.stream}-wal-push.toml"


def _check_store(config: Config, server_user: str | None) -> None:
    """A file store must be a directory the server's user can create files in (wal-push
    writes there as that user): refused here, not at the first archived segment."""
    store = store_for_url(config.store_url, config)  # a bad URL is refused here too
    if not isinstance(store, LocalStore):
        return
    path = store.root
    existing = next(p for p in (path, *path.parents) if p.exists())
    if server_user is None:
        writable = os.access(existing, os.W_OK | os.X_OK)
    else:
        probe = subprocess.run(["test", "-w", str(existing), "-a", "-x", str(existing)],
                               user=server_user, capture_output=True, check=False)
        writable = probe.returncode == 0
    if not writable:
        who = server_user or "this user"
        raise ConfigError(f"the store {path} is not writable by {who}, who runs "
                          f"archive_command: {existing} is not, or a directory above it is "
                          f"closed to {who}; choose --store in a directory {who} may write, "
                          f"or an S3 bucket")


def _write_private(path: Path, text: str) -> None:
    """``text`` into a new file only its owner may read (never briefly readable by others)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
