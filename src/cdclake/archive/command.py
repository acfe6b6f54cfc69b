"""Build an ``archive_command`` that runs ``cdclake wal-push`` as the server's user.

PostgreSQL runs archive_command as the user that owns the cluster (``postgres``), not as
whoever installed cdclake. When the interpreter cdclake is installed in cannot be run by that
user — a virtualenv made from a pyenv Python under ``/root``, say — the same-version system
interpreter can still run cdclake's code with the environment's ``sys.path`` handed over. We
probe instead of guessing: each candidate is actually run as that user.

The command carries the store settings as ``CDCLAKE_*`` variables. It lands in
``postgresql.auto.conf``, so in production prefer a config file readable only by the server's
user (``CDCLAKE_CONFIG``) or instance credentials over keys in the command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from cdclake.config import Config
from cdclake.errors import SourceError


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

    ``None`` means the current user: this interpreter. Raises SourceError if no candidate
    works, naming the user and what was tried.
    """
    if run_as is None:
        return sys.executable, {}
    here = [p for p in sys.path
            if p and os.path.isdir(p) and not p.startswith(sys.base_prefix)]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates: list[tuple[str, dict[str, str]]] = [(sys.executable, {})]
    for system in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if Path(system).exists() and Path(system).resolve() != Path(sys.executable).resolve():
            candidates.append((system, {"PYTHONPATH": os.pathsep.join(here)}))
    tried = []
    for python, extra in candidates:
        try:
            probe = subprocess.run(
                [python, "-P", "-c", "import cdclake.archive.push"], env={**os.environ, **extra},
                user=run_as, capture_output=True, text=True, timeout=60, cwd="/")
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{python}: {exc}")
            continue
        if probe.returncode == 0:
            return python, extra
        tried.append(f"{python}: {probe.stderr.strip().splitlines()[-1:] or probe.returncode}")
    raise SourceError(
        f"user {run_as!r} cannot run cdclake for archive_command (tried {'; '.join(tried)}): "
        f"make {sys.executable} and its site-packages readable by {run_as!r}, or install "
        "cdclake for a Python that user can run")


def wal_push_command(config: Config | Mapping[str, str], *, compress: bool = False,
                     run_as: str | None = None, verbose: bool = False) -> str:
    """``archive_command`` text: ``env CDCLAKE_...=... python -P -m cdclake.cli wal-push %p``.

    ``config`` is a Config (its store settings are used) or the variables themselves.
    ``run_as``: the server's user when it differs from ours (we are root and PostgreSQL runs
    as ``postgres``); the interpreter is chosen by :func:`python_for_user`.
    """
    env = dict(store_env(config) if isinstance(config, Config) else config)
    python, extra = python_for_user(run_as)
    env.update(extra)
    words = ["env", *(f"{k}={v}" for k, v in env.items()), python, "-P", "-m", "cdclake.cli",
             "wal-push"]
    if compress:
        words.append("--compress")
    if verbose:
        words.append("--verbose")
    return " ".join(shlex.quote(w) for w in words) + " %p"
