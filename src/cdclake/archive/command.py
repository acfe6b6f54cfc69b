"""Build an ``archive_command`` that runs ``cdclake wal-push`` as the server's user.

PostgreSQL runs archive_command as the user that owns the cluster (``postgres``), not as
whoever installed cdclake. Built by root for that user, the command runs no code from the
checkout but a copy only root can change, which the command checks itself at every start
before it imports anything (:mod:`cdclake.archive.runtime`). We probe instead of guessing:
each candidate interpreter is run as that user with the very command.

The command lands in ``postgresql.auto.conf`` and in ``pg_settings``, which any role can read
(``SHOW archive_command``), so it never carries an S3 secret: with keys configured, the store
settings go into a TOML file only the server's user can read (mode 0600, its owner), named by
``CDCLAKE_CONFIG`` in the command; without keys the command carries the store settings as
``CDCLAKE_*`` variables and boto3 finds credentials its own way (instance role, the server
user's ``~/.aws``).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from cdclake.archive import boot, runtime
from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError

#: what PostgreSQL 15 keeps of archive_command once %p and %f are replaced (MAXPGPATH - 1);
#: 16 and later take any length
ARCHIVE_COMMAND_MAX = 1023


def store_env(config: Config) -> dict[str, str]:
    """The ``CDCLAKE_*`` variables that make wal-push write where ``config`` points."""
    env = {
        "CDCLAKE_STORE_URL": config.effective_store_url(),
        "CDCLAKE_S3_ENDPOINT_URL": config.s3_endpoint_url,
        "CDCLAKE_S3_REGION": config.s3_region,
        "CDCLAKE_S3_ACCESS_KEY_ID": config.s3_access_key_id,
        "CDCLAKE_S3_SECRET_ACCESS_KEY": config.s3_secret_access_key,
    }
    return {k: v for k, v in env.items() if v}


def cdclake_for_user(run_as: str | None) -> list[str]:
    """The words that run ``cdclake`` as user ``run_as`` (None: this user).

    This user runs this interpreter. Another user (we are root, PostgreSQL runs as
    ``postgres``) never runs the checkout — a clone in root's home is closed to them, and one
    anywhere else may be open to others or change under the archiver — but a copy of what
    wal-push imports that only root can change (:func:`runtime.runtime_copy`), with an
    interpreter of this version only root or that user can change, isolated, through
    :data:`runtime.BOOTSTRAP`, which checks the copy at every start. Each interpreter is
    probed as that user with the very words; raises SourceError if none works, naming the
    user and what was tried.
    """
    try:
        uid = os.geteuid() if run_as is None else pwd.getpwnam(run_as).pw_uid
    except KeyError as exc:
        raise SourceError(f"archive_command: there is no user {run_as!r}") from exc
    if run_as is None or uid == os.geteuid():
        return [sys.executable, "-P", "-m", "cdclake.cli"]
    ids = {0, uid}
    copy = runtime.runtime_copy()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    tried: list[str] = []
    for python in dict.fromkeys([os.path.realpath(sys.executable), f"/usr/bin/python{version}",
                                 f"/usr/local/bin/python{version}"]):
        problem = runtime.unsafe(python, ids) if os.path.exists(python) else "missing"
        words = [python, "-I", "-S", "-c", runtime.BOOTSTRAP, str(copy)]
        if problem is not None:
            tried.append(f"{python}: {problem}")
        elif _can_run([*words, "wal-push", "--help"], run_as, tried):
            return words
    raise SourceError(
        f"user {run_as!r} cannot run cdclake for archive_command (tried {'; '.join(tried)}): "
        f"install Python {version} where only root can change it (/usr/bin/python{version})")


def _can_run(words: list[str], run_as: str, tried: list[str]) -> bool:
    """Whether ``words`` run as ``run_as``; notes what failed in ``tried``."""
    try:
        probe = subprocess.run(words, user=run_as, capture_output=True, text=True, timeout=60,
                               cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        tried.append(f"{words[0]}: {exc}")
        return False
    if probe.returncode != 0:
        tried.append(f"{words[0]}: {probe.stderr.strip().splitlines()[-1:] or probe.returncode}")
    return probe.returncode == 0


def write_credentials(config: Config, path: Path, run_as: str | None = None) -> Path:
    """Write ``config``'s store settings as a TOML configuration file that only ``run_as``
    (default: this user) can read, created with mode 0600 (never briefly readable).

    The file tells wal-push where WAL goes and with which keys, so no one else may change or
    swap it: every directory above it (as given and as its symlinks resolve) must belong to
    root, this user or ``run_as`` and be writable by no one else — a sticky one like
    ``/tmp`` aside, where no one may rename another's entries (:func:`_changeable`). It is
    created anew, never opened through a symlink, given to ``run_as`` through its
    descriptor, and must still be the file at ``path`` once written."""
    lines = ["[cdclake]"] + [f"{k.removeprefix('CDCLAKE_').lower()} = {json.dumps(v)}"
                             for k, v in store_env(config).items()]
    try:
        owner = None if run_as is None else pwd.getpwnam(run_as)
    except KeyError as exc:
        raise SourceError(f"archive_command: there is no user {run_as!r}") from exc
    ids = {0, os.geteuid()} | ({owner.pw_uid} if owner else set())
    problem = _changeable(path.parent, ids)
    if problem is not None:
        trusted = " and ".join(["root", *(f"uid {uid}" for uid in sorted(ids - {0}))])
        raise ConfigError(f"not writing the credentials file {path}: {problem} may be changed "
                          f"by a user other than {trusted}")
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        if owner is not None:
            os.fchown(fd, owner.pw_uid, owner.pw_gid)
        f.write("\n".join(lines) + "\n")
        f.flush()
        written, here = os.fstat(fd), os.lstat(path)
        if (written.st_dev, written.st_ino) != (here.st_dev, here.st_ino):
            raise ConfigError(f"the credentials file {path} was replaced while it was written")
    return path


def _changeable(directory: Path, ids: set[int]) -> str | None:
    """The first directory at or above ``directory`` — as given, and as its symlinks resolve
    — that a user outside ``ids`` owns or that group or others may write to (unless sticky),
    as ``path (mode, owner uid N)``; None when there is none. A symlink's own mode means
    nothing: the directory holding it decides who may replace it."""
    given = os.path.abspath(directory)
    for p in dict.fromkeys(boot.above(given) + boot.above(os.path.realpath(given))):
        st = os.lstat(p)
        writable = (not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022
                    and not st.st_mode & stat.S_ISVTX)
        if st.st_uid not in ids or writable:
            return f"{p} ({stat.filemode(st.st_mode)}, owner uid {st.st_uid})"
    return None


def wal_push_command(config: Config | Mapping[str, str], *, compress: bool = False,
                     run_as: str | None = None, verbose: bool = False,
                     credentials: Path | None = None) -> str:
    """``archive_command`` text: ``env CDCLAKE_...=... <cdclake> wal-push %p``.

    ``config`` is a Config (its store settings are used) or the variables themselves.
    ``run_as``: the server's user when it differs from ours (we are root and PostgreSQL runs
    as ``postgres``); how cdclake is run is chosen by :func:`cdclake_for_user`. A Config with an
    S3 secret key needs ``credentials``: the file :func:`write_credentials` writes for
    ``run_as``, which the command then names instead of carrying the settings.
    """
    env = dict(store_env(config) if isinstance(config, Config) else config)
    if "CDCLAKE_S3_SECRET_ACCESS_KEY" in env:
        if credentials is None or not isinstance(config, Config):
            raise ConfigError("archive_command would show the S3 secret key to every role "
                              "(SHOW archive_command): give a credentials file for it, or use "
                              "boto3's own credentials (an instance role, the server user's "
                              "~/.aws)")
        env = {"CDCLAKE_CONFIG": str(write_credentials(config, credentials, run_as))}
    words = ["env", *(f"{k}={v}" for k, v in env.items()), *cdclake_for_user(run_as),
             "wal-push"]
    if compress:
        words.append("--compress")
    if verbose:
        words.append("--verbose")
    command = " ".join(shlex.quote(w) for w in words) + " %p"
    # %p becomes pg_wal/<24 hex digits>; PostgreSQL 15 silently cuts what is longer
    if len(command.encode()) - 2 + len("pg_wal/") + 24 > ARCHIVE_COMMAND_MAX:
        raise ConfigError(f"archive_command would be longer than the {ARCHIVE_COMMAND_MAX} "
                          "bytes PostgreSQL 15 runs: use shorter store settings or a shorter "
                          "credentials path")
    return command
