"""The archive_command text: quoting, settings carried over, %p last."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from cdclake.archive.command import cdclake_for_user, store_env, wal_push_command
from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError


def test_command_carries_the_store_settings_and_ends_with_p() -> None:
    cfg = Config(store_url="s3://lake/my stream", s3_endpoint_url="http://127.0.0.1:9")
    cmd = wal_push_command(cfg, compress=True)
    assert cmd.endswith(" %p")
    words = shlex.split(cmd[: -len(" %p")])
    assert words[0] == "env"
    assert "CDCLAKE_STORE_URL=s3://lake/my stream" in words
    assert words[-6:] == [sys.executable, "-P", "-m", "cdclake.cli", "wal-push", "--compress"]


def test_an_s3_secret_goes_to_a_private_file_not_into_the_command(tmp_path: Path) -> None:
    cfg = Config(store_url="s3://lake/my stream", s3_endpoint_url="http://127.0.0.1:9",
                 s3_access_key_id="id", s3_secret_access_key="it's \"secret\"")
    with pytest.raises(ConfigError, match="would show the S3 secret key to every role"):
        wal_push_command(cfg)
    path = tmp_path / "wal-push.toml"
    cmd = wal_push_command(cfg, credentials=path)
    assert cfg.s3_secret_access_key not in cmd and "S3" not in cmd
    assert shlex.split(cmd)[:3] == ["env", f"CDCLAKE_CONFIG={path}", sys.executable]
    assert path.stat().st_mode & 0o777 == 0o600
    # what wal-push then loads is the same store
    loaded = Config.load(env={"CDCLAKE_CONFIG": str(path)})
    assert (loaded.store_url, loaded.s3_endpoint_url, loaded.s3_access_key_id,
            loaded.s3_secret_access_key) == (cfg.store_url, cfg.s3_endpoint_url, "id",
                                             cfg.s3_secret_access_key)
    # written again (a second install): replaced, still private
    wal_push_command(cfg.replace(s3_secret_access_key="new"), credentials=path)
    assert Config.load(env={"CDCLAKE_CONFIG": str(path)}).s3_secret_access_key == "new"
    assert path.stat().st_mode & 0o777 == 0o600


def test_store_env_leaves_out_empty_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = store_env(Config(home=tmp_path))
    assert env == {"CDCLAKE_STORE_URL": (tmp_path / "store").as_uri(),
                   "CDCLAKE_S3_REGION": "us-east-1"}


def test_current_user_runs_this_interpreter() -> None:
    assert cdclake_for_user(None) == [sys.executable, "-P", "-m", "cdclake.cli"]


def test_an_unknown_server_user_is_named() -> None:
    with pytest.raises(SourceError, match="there is no user 'no-such-user-cdclake'"):
        cdclake_for_user("no-such-user-cdclake")


def test_a_command_postgresql_15_would_cut_is_refused() -> None:
    with pytest.raises(ConfigError, match="longer than the 1023 bytes PostgreSQL 15 runs"):
        wal_push_command({"CDCLAKE_STORE_URL": "file:///" + "x" * 1000})
