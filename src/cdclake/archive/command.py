"""Build an ``archive_command`` that runs ``cdclake wal-push`` as the server's user.

PostgreSQL runs archive_command as the user that owns the cluster (``postgres``), not as
whoever installed cdclake. When the interpreter cdclake is installed in cannot be run by that
user — a virtualenv made from a pyenv Python under ``/root``, say — the same-version system
interpreter can still run cdclake's code with the environment's ``sys.path`` handed over. We
probe instead of guessing: each candidate is actually run as that user.

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
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError


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


def python_for_user(run_as: str | None) -> tuple[str, dict[str, str]]:
    """An interpreter (and extra environment) that can import cdclake as user ``run_as``.

    ``None`` means the current user: this interpreter. Otherwise each candidate is probed as
    that user: this interpreter; the system interpreter of the same version with our import
    paths; the same with a readable copy of what wal-push imports
    (:mod:`cdclake.archive.runtime`), for a checkout that user cannot enter. Raises
    SourceError if none works, naming the user and what was tried.
    """
    if run_as is None:
        return sys.executable, {}
    here = [p for p in sys.path
            if p and os.path.isdir(p) and not p.startswith(sys.base_prefix)]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    systems = [s for s in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
               if Path(s).exists() and s != sys.executable]
    tried: list[str] = []
    candidates: list[tuple[str, dict[str, str]]] = [(sys.executable, {})]
    candidates += [(s, {"PYTHONPATH": os.pathsep.join(here)}) for s in systems]
    for python, extra in candidates:
        if _can_run(python, extra, run_as, tried):
            return python, extra
    if systems:
        from cdclake.archive.runtime import runtime_copy

        extra = {"PYTHONPATH": str(runtime_copy(here))}
        if _can_run(systems[0], extra, run_as, tried):
            return systems[0], extra
    raise SourceError(
        f"user {run_as!r} cannot run cdclake for archive_command (tried {'; '.join(tried)}): "
        f"make {sys.executable} and its site-packages readable by {run_as!r}, or install "
        "cdclake for a Python that user can run")


def _can_run(python: str, extra: dict[str, str], run_as: str, tried: list[str]) -> bool:
    """Whether ``python`` imports wal-push as ``run_as``; notes what failed in ``tried``."""
    try:
        probe = subprocess.run(
            [python, "-P", "-c", "import cdclake.archive.push"], env={**os.environ, **extra},
            user=run_as, capture_output=True, text=True, timeout=60, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        tried.append(f"{python}: {exc}")
        return False
    if probe.returncode != 0:
        tried.append(f"{python}: {probe.stderr.strip().splitlines()[-1:] or probe.returncode}")
    return probe.returncode == 0


def write_credentials(config: Config, path: Path, run_as: str | None = None) -> Path:
    """Write ``config``'s store settings as a TOML configuration file that only ``run_as``
    (default: this user) can read, created with mode 0600 (never briefly readable)."""
    lines = ["[cdclake]"] + [f"{k.removeprefix('CDCLAKE_').lower()} = {json.dumps(v)}"
                             for k, v in store_env(config).items()]
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    if run_as is not None:
        user = pwd.getpwnam(run_as)
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def wal_push_command(config: Config | Mapping[str, str], *, compress: bool = False,
                     run_as: str | None = None, verbose: bool = False,
                     credentials: Path | None = None) -> str:
    """``archive_command`` text: ``env CDCLAKE_...=... python -P -m cdclake.cli wal-push %p``.

    ``config`` is a Config (its store settings are used) or the variables themselves.
    ``run_as``: the server's user when it differs from ours (we are root and PostgreSQL runs
    as ``postgres``); the interpreter is chosen by :func:`python_for_user`. A Config with an
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
    python, extra = python_for_user(run_as)
    env.update(extra)
    words = ["env", *(f"{k}={v}" for k, v in env.items()), python, "-P", "-m", "cdclake.cli",
             "wal-push"]
    if compress:
        words.append("--compress")
    if verbose:
        words.append("--verbose")
    return " ".join(shlex.quote(w) for w in words) + " %p"
