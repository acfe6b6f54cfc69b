"""A local S3 endpoint for the demo and the tests: ``moto_server`` on 127.0.0.1.

It runs as a separate process and cdclake talks to it over HTTP exactly as to AWS or MinIO —
no in-process mocking, so what passes here exercises the real boto3 path (signing, retries,
conditional writes, error mapping). Data lives in the server's memory and dies with it.

``python -m cdclake.local.s3 start|stop|env --state-dir DIR`` runs it in the background for
``infra/s3.sh`` and the demo; :class:`LocalS3` is the same as a context manager.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdclake.config import Config
from cdclake.errors import StoreUnreachableError

DEFAULT_BUCKET = "cdclake"
#: moto accepts any credentials; these make boto3 sign requests without looking elsewhere.
ACCESS_KEY_ID = "cdclake-local"
SECRET_ACCESS_KEY = "cdclake-local-secret"
REGION = "us-east-1"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalS3:
    """A running moto_server with one bucket."""

    endpoint_url: str
    bucket: str = DEFAULT_BUCKET
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    region: str = REGION
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _own_log: Path | None = field(default=None, repr=False)  #: temp log we delete on stop

    @classmethod
    def start(cls, bucket: str = DEFAULT_BUCKET, *, host: str = "127.0.0.1",
              port: int | None = None, log_path: Path | None = None, timeout: float = 30.0,
              detach: bool = False) -> LocalS3:
        """Start the server on a free port (or ``port``), wait for it, create ``bucket``.

        ``detach`` puts it in its own session so it outlives this process (infra/s3.sh).
        Raises StoreUnreachableError with the server's output if it does not come up.
        """
        attempts = 1 if port is not None else 3  # a free port can be taken before we bind it
        last_error = ""
        for _ in range(attempts):
            chosen = port if port is not None else _free_port(host)
            if log_path is None:
                fd, name = tempfile.mkstemp(prefix="cdclake-moto-", suffix=".log")
                os.close(fd)
                log = Path(name)
            else:
                log = log_path
            # moto logs every request: to a file, never a pipe nobody drains
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", host, "-p", str(chosen)],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=detach)
            url = f"http://{host}:{chosen}"
            server = cls(url, bucket, pid=proc.pid, _process=proc,
                         _own_log=log if log_path is None else None)
            error = _wait_until_up(url, proc, log, timeout)
            if error is None:
                server.create_bucket()
                return server
            last_error = error
            server.stop()
        raise StoreUnreachableError(f"local S3 (moto_server) did not start: {last_error}")

    # -- use -----------------------------------------------------------------------------

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name=self.region,
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=self.secret_access_key)

    def create_bucket(self, bucket: str | None = None) -> None:
        client = self.client()
        name = bucket or self.bucket
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)

    def store_url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}" if prefix else f"s3://{self.bucket}"

    def env(self, prefix: str = "") -> dict[str, str]:
        """``CDCLAKE_*`` variables pointing cdclake at ``prefix`` in this server's bucket."""
        return {
            "CDCLAKE_STORE_URL": self.store_url(prefix),
            "CDCLAKE_S3_ENDPOINT_URL": self.endpoint_url,
            "CDCLAKE_S3_REGION": self.region,
            "CDCLAKE_S3_ACCESS_KEY_ID": self.access_key_id,
            "CDCLAKE_S3_SECRET_ACCESS_KEY": self.secret_access_key,
        }

    def config(self, base: Config | None = None, prefix: str = "") -> Config:
        """``base`` (default: defaults) pointed at ``prefix`` in this server's bucket."""
        return (base or Config()).replace(
            store_url=self.store_url(prefix), s3_endpoint_url=self.endpoint_url,
            s3_region=self.region, s3_access_key_id=self.access_key_id,
            s3_secret_access_key=self.secret_access_key)

    # -- lifecycle ----------------------------------------------------------------------------

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server this object started (or, detached, the one its pid names)."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait(timeout)
            self._process = None
        elif self.pid is not None and _is_moto(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _is_moto(self.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        self.pid = None
        if self._own_log is not None:
            self._own_log.unlink(missing_ok=True)
            self._own_log = None

    def __enter__(self) -> LocalS3:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state file (infra/s3.sh) --------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "bucket": self.bucket, "pid": self.pid,
                "access_key_id": self.access_key_id,
                "secret_access_key": self.secret_access_key, "region": self.region}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LocalS3:
        return cls(state["endpoint_url"], state["bucket"], state["access_key_id"],
                   state["secret_access_key"], state["region"], state.get("pid"))


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], log: Path,
                   timeout: float) -> str | None:
    """None when the server answers HTTP; else why it did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = log.read_text(errors="replace").strip()[-2000:]
            return f"moto_server exited with {proc.returncode}: {err}"
        try:
            with urllib.request.urlopen(url + "/moto-api/", timeout=2):
                return None
        except urllib.error.HTTPError:
            return None  # it answered
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return f"no answer at {url} within {timeout:.0f}s"


def _is_moto(pid: int) -> bool:
    """Whether ``pid`` is still a moto server (a stale pid file must not kill a stranger)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"moto.server" in cmdline or b"moto_server" in cmdline


# -- python -m cdclake.local.s3 -------------------------------------------------------------


def _state_file(state_dir: Path) -> Path:
    return state_dir / "s3.json"


def _exports(server: LocalS3) -> str:
    """Shell lines a user can ``eval``: the endpoint and the bucket as the store."""
    return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in server.env().items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdclake.local.s3",
                                     description="run a local S3 endpoint (moto_server)")
    parser.add_argument("action", choices=("start", "stop", "env"))
    parser.add_argument("--state-dir", type=Path, default=Path(".cdclake/s3"))
    parser.add_argument("--bucket", default=DEFAULT_BUCKET)
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    state = _state_file(args.state_dir)
    current = LocalS3.from_state(json.loads(state.read_text())) if state.exists() else None
    if args.action == "start":
        if current is not None and current.pid is not None and _is_moto(current.pid):
            print(_exports(current))
            return 0
        args.state_dir.mkdir(parents=True, exist_ok=True)
        server = LocalS3.start(args.bucket, port=args.port, detach=True,
                               log_path=args.state_dir / "moto.log")
        server._process = None  # detached: it must outlive us; stop() finds it by pid
        state.write_text(json.dumps(server.to_state(), indent=1))
        print(_exports(server))
        return 0
    if args.action == "env":
        if current is None or current.pid is None or not _is_moto(current.pid):
            print(f"no local S3 running (state: {state})", file=sys.stderr)
            return 1
        print(_exports(current))
        return 0
    if current is not None:
        current.stop()
        state.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
