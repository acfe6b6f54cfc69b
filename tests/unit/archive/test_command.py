"""The archive_command text: quoting, settings carried over, %p last."""

from __future__ import annotations

import shlex
import sys

from cdclake.archive.command import python_for_user, store_env, wal_push_command
from cdclake.config import Config


def test_command_carries_the_store_settings_and_ends_with_p() -> None:
    cfg = Config(store_url="s3://lake/my stream", s3_endpoint_url="http://127.0.0.1:9",
                 s3_access_key_id="id", s3_secret_access_key="it's secret")
    cmd = wal_push_command(cfg, compress=True)
    assert cmd.endswith(" %p")
    words = shlex.split(cmd[: -len(" %p")])
    assert words[0] == "env"
    assert "CDCLAKE_STORE_URL=s3://lake/my stream" in words
    assert "CDCLAKE_S3_SECRET_ACCESS_KEY=it's secret" in words
    assert words[-6:] == [sys.executable, "-P", "-m", "cdclake.cli", "wal-push", "--compress"]


def test_store_env_leaves_out_empty_settings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = store_env(Config(home=tmp_path))
    assert env == {"CDCLAKE_STORE_URL": (tmp_path / "store").as_uri(),
                   "CDCLAKE_S3_REGION": "us-east-1"}


def test_current_user_runs_this_interpreter() -> None:
    assert python_for_user(None) == (sys.executable, {})
