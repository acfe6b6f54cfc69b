"""The follower's loop without a server: when it runs, what it does with a failed run, its
signals, and what it looks at in the archive. ``steps.run_once`` is replaced by a recorder
here; tests/e2e/pipeline/test_follow.py runs the real one."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.archive import Layout, open_store
from cdclake.config import Config
from cdclake.errors import ConcurrentRunError, ConfigError, LakeError
from cdclake.pipeline import follow as follow_module
from cdclake.pipeline import steps
from cdclake.pipeline.follow import archive_mark, follow, stop_signals
from cdclake.pipeline.params import RunParams


@pytest.fixture
def config(tmp_path: Path) -> Config:
    (tmp_path / "archive").mkdir()
    return Config(home=tmp_path / "home", archive_dir=tmp_path / "archive",
                  store_url=(tmp_path / "store").as_uri(), follow_poll=0.1)


class Script:
    """What the archive shows at each poll, and a recorder standing in for ``run_once``
    (raising ``fail[i]`` on its i-th call, if given)."""

    def __init__(self, marks: list[Any], fail: dict[int, Exception] | None = None) -> None:
        self.marks, self.fail = list(marks), fail or {}
        self.stop = threading.Event()
        self.runs: list[RunParams] = []
        self.held: list[list[str]] = []

    def mark(self, _config: Config) -> Any:
        if len(self.marks) == 1:
            self.stop.set()
        return self.marks.pop(0) if len(self.marks) > 1 else self.marks[0]

    def run_once(self, _config: Config, params: RunParams, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["spark"] == "session" and kwargs["stop"]() is False
        self.runs.append(params)
        self.held.append(sorted(steps._held))  # the lease the follower holds for its life
        if len(self.runs) in self.fail:
            raise self.fail[len(self.runs)]
        return {"steps": {"ship": {"pending": []}}}


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def make(marks: list[Any], fail: dict[int, Exception] | None = None) -> Script:
        s = Script(marks, fail)
        monkeypatch.setattr(follow_module, "archive_mark", s.mark)
        monkeypatch.setattr(steps, "run_once", s.run_once)
        monkeypatch.setattr("cdclake.quality.QualityContext.for_config", lambda c: None)
        return s
    yield make


def test_a_run_only_when_the_archive_changed(config: Config, script: Any) -> None:
    s = script(["a", "a", "a", "b", "b", "c", "c", "c"])
    params = RunParams(start_lsn=0x1000000, tables=["public.t"], snapshot_tables=["public.t"])
    assert follow(config, params, stop=s.stop, spark="session") == 3
    # a start LSN and a snapshot again go with the first run only; the tables with every one
    assert [(p.start_lsn, list(p.snapshot_tables), list(p.tables)) for p in s.runs] == [
        (0x1000000, ["public.t"], ["public.t"]), (None, [], ["public.t"]),
        (None, [], ["public.t"])]
    assert s.held == [["decode"]] * 3 and steps._held == {}  # held while following, given back


def test_a_failed_run_is_tried_again_a_config_error_ends_it(config: Config,
                                                             script: Any) -> None:
    s = script(["a"] * 6, fail={1: LakeError("the store is away")})
    said: list[Exception] = []
    ticks = iter(range(1000))
    assert follow(config, stop=s.stop, spark="session", on_error=said.append,
                  clock=lambda: float(next(ticks))) == 2
    assert [str(e) for e in said] == ["the store is away"]

    s = script(["a", "b"], fail={1: ConfigError("bad setting")})
    with pytest.raises(ConfigError, match="bad setting"):
        follow(config, stop=s.stop, spark="session")


def test_what_is_for_one_run_is_refused(config: Config) -> None:
    for params in (RunParams(dry_run=True), RunParams(until_segment="000000010000000000000002")):
        with pytest.raises(ConfigError, match="--follow"):
            follow(config, params, stop=threading.Event(), spark="session")


def test_the_first_signal_stops_the_second_abandons() -> None:
    stop = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(5)  # the handler raises here
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_mark_is_the_archive_directory_and_the_manifest_together(config: Config) -> None:
    assert archive_mark(config) == (None, 0)
    assert config.archive_dir is not None
    (config.archive_dir / "000000010000000000000001").write_bytes(b"x")
    first = archive_mark(config)
    assert first == ("000000010000000000000001", 1)
    # shipped: in the manifest too, the same name — no new run for it
    store, layout = open_store(config), Layout()
    store.put(layout.manifest_key("000000010000000000000001"), b"{}")
    assert archive_mark(config) == first
    store.put(layout.manifest_key("000000010000000000000002"), b"{}")  # pushed by wal-push
    assert archive_mark(config) == ("000000010000000000000002", 2)


def test_a_lost_lease_is_taken_again(config: Config, script: Any,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower that stalled past its lease's expiry, while another run took the lease,
    takes it again (waiting for that run) instead of failing every run after."""
    s = script(["a", "b", "c", "c"])
    generations: list[int] = []
    record = s.run_once

    def run_once(*args: Any, **kwargs: Any) -> dict[str, Any]:
        lease = steps._held["decode"]
        generations.append(lease.generation)
        # another run took the next generation (and has finished with it)
        lease.store.put(lease._key(lease.generation + 1), lease._document(released=True),
                        if_absent=True)
        with pytest.raises(ConcurrentRunError):
            lease.check()
        return record(*args, **kwargs)

    monkeypatch.setattr(steps, "run_once", run_once)
    assert follow(config, stop=s.stop, spark="session") == 3
    assert generations == sorted(set(generations)) and len(generations) == 3, generations
