"""The archive_command text: quoting, settings carried over, %p last."""

from __future__ import annotations

import os
import pwd
import shlex
import sys
from pathlib import Path

import pytest

from cdclake.archive.command import (
    cdclake_for_user,
    store_env,
    wal_push_command,
    write_credentials,
)
from cdclake.config import Config
from cdclake.errors import ConfigError, SourceError
from cdclake.local.postgres import OWNER


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


# -- the credentials file: no one else may change or swap what wal-push reads ---------------

SECRET = Config(store_url="s3://lake/main", s3_access_key_id="id", s3_secret_access_key="key")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's directory "
                                "and giving the file to the server's user need root")


def other_user() -> int:
    return pwd.getpwnam("nobody").pw_uid


@needs_root
def test_a_symlinked_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    """A directory on the path that is someone else's symlink: they could point it anywhere
    after the check, so the secret would go where they like. Nothing is written."""
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    os.lchown(link, other_user(), -1)
    with pytest.raises(ConfigError, match=rf"not writing the credentials file {link}/c\.toml: "
                                          rf"{link} \(lrwxrwxrwx, owner uid {other_user()}\) may "
                                          r"be changed by a user other than root"):
        write_credentials(SECRET, link / "c.toml", run_as=OWNER)
    assert list(target.iterdir()) == []


@needs_root
def test_a_directory_others_may_write_to_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=rf"{shared} \(drwxrwxrwx, owner uid 0\) may be "
                                          rf"changed by a user other than root and uid "
                                          rf"{pwd.getpwnam(OWNER).pw_uid}$"):
        write_credentials(SECRET, shared / "c.toml", run_as=OWNER)
    assert list(shared.iterdir()) == []
    shared.chmod(0o1777)  # as /tmp: no one may rename or remove root's entries there
    private = shared / "private"
    private.mkdir(mode=0o700)
    path = write_credentials(SECRET, private / "c.toml", run_as=OWNER)
    st = path.lstat()
    assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam(OWNER).pw_uid, 0o600)
    assert Config.load(env={"CDCLAKE_CONFIG": str(path)}).s3_secret_access_key == "key"


@needs_root
def test_a_symlink_planted_at_the_file_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    path = tmp_path / "c.toml"
    path.symlink_to(victim)
    write_credentials(SECRET, path, run_as=OWNER)
    assert not path.is_symlink() and victim.read_text() == "root's\n"
    assert victim.stat().st_uid == 0 and path.stat().st_uid == pwd.getpwnam(OWNER).pw_uid


@needs_root
def test_a_file_swapped_for_a_symlink_while_written_gives_nothing_away(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between creating the file and handing it to the server's user, a swap of the name for
    a symlink must not hand the symlink's target over (chown by name follows it), and the
    command must not name a file that is not the one written."""
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    path = tmp_path / "c.toml"
    real = os.fdopen

    def swap_then_open(fd: int, *args: object, **kwargs: object) -> object:
        path.unlink()
        path.symlink_to(victim)  # what a writer of the directory could do at this moment
        return real(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "fdopen", swap_then_open)
    try:
        write_credentials(SECRET, path, run_as=OWNER)
        error = None
    except ConfigError as exc:
        error = str(exc)
    monkeypatch.undo()
    assert victim.stat().st_uid == 0, "the symlink's target was given to the server's user"
    assert victim.read_text() == "root's\n"
    assert error == f"the credentials file {path} was replaced while it was written"
