"""S3Store against a real S3 endpoint over HTTP (moto_server), and an endpoint that is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdclake.archive import open_store
from cdclake.archive.s3 import S3Store
from cdclake.archive.store import sha256_hex
from cdclake.config import Config
from cdclake.errors import ObjectNotFound, StoreError, StoreUnreachableError
from cdclake.local.postgres import free_port
from cdclake.local.s3 import LocalS3

pytestmark = pytest.mark.e2e


def test_object_store_contract_over_http(s3_config: Config) -> None:
    store = open_store(s3_config)
    assert isinstance(store, S3Store)
    assert store.put("wal/b", b"bee") is True
    assert store.put("wal/a", b"ay") is True
    assert store.put("manifest/wal/a.json", b"{}") is True
    assert store.get("wal/a") == b"ay"
    info = store.head("wal/b")
    assert info is not None and (info.size, info.sha256) == (3, sha256_hex(b"bee"))
    assert [o.key for o in store.list("wal/")] == ["wal/a", "wal/b"]
    assert [o.key for o in store.list()] == ["manifest/wal/a.json", "wal/a", "wal/b"]
    assert store.url("wal/a") == f"{s3_config.store_url}/wal/a"
    store.delete("wal/a")
    store.delete("wal/a")
    assert store.head("wal/a") is None
    with pytest.raises(ObjectNotFound, match="'wal/a'"):
        store.get("wal/a")


def test_conditional_put_over_http(s3_config: Config) -> None:
    store = open_store(s3_config)
    assert isinstance(store, S3Store)
    assert store.put("wal/x", b"first", if_absent=True) is True
    assert store.conditional_put_checked  # moto honours If-None-Match
    assert store.put("wal/x", b"second", if_absent=True) is False
    assert store.get("wal/x") == b"first"


def test_racing_conditional_writers_one_wins(s3_config: Config) -> None:
    results: list[tuple[int, bool]] = []
    errors: list[Exception] = []
    barrier = threading.Barrier(6)

    def writer(i: int) -> None:
        store = open_store(s3_config)
        barrier.wait()
        try:
            results.append((i, store.put("wal/race", f"writer {i}".encode(), if_absent=True)))
        except StoreError as exc:  # 409 ConditionalRequestConflict is a legitimate answer
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results if won]
    assert len(winners) == 1, (results, errors)
    assert open_store(s3_config).get("wal/race") == f"writer {winners[0]}".encode()


def test_large_object_round_trip(s3_config: Config) -> None:
    store = open_store(s3_config)
    data = os.urandom(6 << 20)
    store.put("wal/big", data)
    assert store.get("wal/big") == data
    assert store.content_sha256("wal/big") == sha256_hex(data)


def test_missing_bucket_is_named(local_s3: LocalS3) -> None:
    cfg = local_s3.config(prefix="x").replace(store_url="s3://no-such-bucket/x")
    with pytest.raises(StoreError, match="bucket 'no-such-bucket' does not exist"):
        open_store(cfg).put("wal/a", b"x")


def down_config(tmp_path: Path) -> Config:
    port = free_port()  # bound and released: nothing listens there
    return Config(home=tmp_path / "home", store_url="s3://cdclake/down",
                  s3_endpoint_url=f"http://127.0.0.1:{port}", s3_access_key_id="k",
                  s3_secret_access_key="s")


def test_unreachable_endpoint_fails_fast_and_names_it(tmp_path: Path) -> None:
    cfg = down_config(tmp_path)
    store = open_store(cfg)
    started = time.monotonic()
    for call in (lambda: store.put("wal/a", b"x", if_absent=True), lambda: store.get("wal/a"),
                 lambda: store.head("wal/a"), lambda: list(store.list("wal/"))):
        with pytest.raises(StoreUnreachableError, match=f"S3 endpoint {cfg.s3_endpoint_url} "
                           "is unreachable"):
            call()
    assert time.monotonic() - started < 30


def test_local_s3_module_runs_detached_for_infra_scripts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "cdclake.local.s3"]
    started = subprocess.run([*cmd, "start", "--state-dir", str(state)], capture_output=True,
                             text=True, check=True, timeout=60)
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in started.stdout.splitlines())
    server = LocalS3.from_state(json.loads((state / "s3.json").read_text()))
    try:
        assert env["CDCLAKE_S3_ENDPOINT_URL"] == server.endpoint_url
        cfg = Config.load(env={**env, "CDCLAKE_HOME": str(tmp_path)})
        store = open_store(cfg)
        assert store.put("wal/a", b"x") and store.get("wal/a") == b"x"
        again = subprocess.run([*cmd, "env", "--state-dir", str(state)], capture_output=True,
                               text=True, check=True, timeout=60)
        assert again.stdout == started.stdout
    finally:
        subprocess.run([*cmd, "stop", "--state-dir", str(state)], check=True, timeout=60)
    assert server.pid is not None and not running(server.pid)
    assert not (state / "s3.json").exists()


def running(pid: int) -> bool:
    """Alive and not a zombie (the detached server's parent is gone; init reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_files_stream_through_the_store(s3_config: Config, tmp_path: Path) -> None:
    """put_file / get_file: large spill objects go file to object to file, multipart past
    s3transfer's threshold, with the sha256 metadata put writes; the copy is private."""
    store = open_store(s3_config)
    assert isinstance(store, S3Store)
    data = os.urandom(9 << 20)  # past the 8 MiB multipart threshold
    src = tmp_path / "src"
    src.write_bytes(data)
    store.put_file("spill/b/x.spill", src)
    info = store.head("spill/b/x.spill")
    assert info is not None and (info.size, info.sha256) == (len(data), sha256_hex(data))
    out = tmp_path / "out"
    store.get_file("spill/b/x.spill", out)
    assert out.read_bytes() == data and out.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ObjectNotFound, match="'spill/b/none'"):
        store.get_file("spill/b/none", tmp_path / "none")
