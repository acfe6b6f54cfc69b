"""Leases in the store: one holder at a time, taken over only when expired or its process died."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cdclake.archive.lease import Holder, Lease
from cdclake.archive.local import LocalStore
from cdclake.errors import ConcurrentRunError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def lease(store: LocalStore, *, ttl: float = 60, wait: float = 0, clock: Clock | None = None,
          purpose: str = "test") -> Lease:
    return Lease(store, "decode", purpose=purpose, ttl=ttl, wait=wait,
                 clock=clock or time.time)


def test_a_held_lease_refuses_others_until_released(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with lease(store, purpose="the decode step of stream main") as first:
        assert first.generation == 1
        with pytest.raises(ConcurrentRunError, match=r"another run holds the decode lease of "
                           r"file://.*/state/leases/decode/: the decode step of stream main "
                           r"\(pid \d+ on .*\), renewed until .* UTC; waited 0s"):
            lease(store).acquire()
        first.check()
    with lease(store) as second:
        assert second.generation == 2
    # only the newest two generations stay
    assert [o.key for o in store.list("state/leases/")] == [
        "state/leases/decode/0000000001.json", "state/leases/decode/0000000002.json"]


def test_a_waiting_run_gets_the_lease_when_the_holder_releases_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    first = lease(store).acquire()
    threading.Timer(0.5, first.release).start()
    started = time.monotonic()
    with lease(store, wait=30) as second:
        assert second.generation == 2
    assert 0.4 < time.monotonic() - started < 10


def test_an_expired_lease_is_taken_over_and_its_holder_learns_it(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    clock = Clock()
    stalled = lease(store, ttl=10, clock=clock).acquire()
    stalled._stop.set()  # a holder that stopped renewing (stalled), as seen from outside
    clock.now += 11
    with lease(store, ttl=10, clock=clock) as taker:
        assert taker.generation == 2
        with pytest.raises(ConcurrentRunError, match="lost the decode lease"):
            stalled.check()
    stalled.release()  # does not mark the newer generation released


def test_a_holder_that_stood_still_past_its_ttl_keeps_a_lease_nobody_took(
        tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    clock = Clock()
    paused = lease(store, ttl=10, clock=clock).acquire()
    paused._stop.set()  # the whole process stood still: its renewer did not run either
    clock.now += 11
    paused.check()  # nobody took over: renewed, not given up
    assert paused.expires == clock.now + 10
    with pytest.raises(ConcurrentRunError, match="another run holds the decode lease"):
        lease(store, ttl=10, clock=clock).acquire()
    paused.release()


def test_renewal_keeps_a_lease_past_its_ttl(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with lease(store, ttl=1.5) as held:
        time.sleep(2.5)  # renewed every 0.5 s
        held.check()
        with pytest.raises(ConcurrentRunError):
            lease(store, ttl=1.5).acquire()


HOLD = """
import sys, time
from pathlib import Path
from cdclake.archive.lease import Lease
from cdclake.archive.local import LocalStore
Lease(LocalStore(Path(sys.argv[1])), "decode", purpose="a run", ttl=3600, wait=0).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_the_lease_of_a_killed_local_run_is_free_at_once(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(ConcurrentRunError, match="a run"):
            lease(LocalStore(tmp_path)).acquire()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with lease(LocalStore(tmp_path)) as taken:  # its ttl is an hour: no waiting for it
            assert taken.generation == 2
    finally:
        proc.kill()
        proc.wait()


def test_of_racing_contenders_exactly_one_wins(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    won: list[Lease] = []
    refused: list[str] = []
    barrier = threading.Barrier(6)

    def contend() -> None:
        barrier.wait()
        try:
            won.append(lease(store).acquire())
        except ConcurrentRunError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 5
    won[0].release()


class PausedStore(LocalStore):
    """A store whose first create of ``key`` waits for ``go``: a contender that looked at the
    generations, then stalled (a paused VM, a slow request) before it created the next one."""

    def __init__(self, root: Path, key: str) -> None:
        super().__init__(root)
        self.key = key
        self.reached = threading.Event()
        self.go = threading.Event()

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        if key == self.key and if_absent and not self.reached.is_set():
            self.reached.set()
            assert self.go.wait(30)
        return super().put(key, data, if_absent=if_absent)


def test_a_deleted_generation_number_is_never_held_again(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    for _ in range(2):
        lease(store).acquire().release()
    # a contender sees generation 2 released and stalls before it creates generation 3
    paused = PausedStore(tmp_path, "state/leases/decode/0000000003.json")
    contender = lease(paused)
    taken: list[Lease | BaseException] = []

    def contend() -> None:
        try:
            taken.append(contender.acquire())
        except BaseException as exc:  # reported below
            taken.append(exc)

    thread = threading.Thread(target=contend)
    thread.start()
    assert paused.reached.wait(30)
    # meanwhile runs take generations 3, 4 and 5; taking 5 deletes 3
    for expected in (3, 4, 5):
        held = lease(store).acquire()
        assert held.generation == expected
        held.release()
    assert not store.exists("state/leases/decode/0000000003.json")
    paused.go.set()  # the contender wakes and creates generation 3 again
    thread.join(30)
    assert len(taken) == 1 and isinstance(taken[0], Lease), taken
    assert taken[0].generation == 6  # not 3: that number was another run's fencing token
    taken[0].release()
    assert [o.key for o in store.list("state/leases/")] == [
        "state/leases/decode/0000000005.json", "state/leases/decode/0000000006.json"]


def test_a_holder_with_the_same_host_name_on_another_kernel_is_not_taken_for_dead(
        tmp_path: Path) -> None:
    """Containers on two hosts may share a host name (and the initial PID namespace's id):
    its pid means nothing here, so the lease waits for its expiry."""
    store = LocalStore(tmp_path)
    here = Holder.me("a run elsewhere").__dict__
    elsewhere = {**here, "pid": 4_000_000, "started": "1",  # no such process here
                 "boot": "00000000-0000-0000-0000-000000000000"}
    store.put("state/leases/decode/0000000001.json", json.dumps(
        {"holder": elsewhere, "expires": time.time() + 60, "released": False}).encode())
    with pytest.raises(ConcurrentRunError, match="a run elsewhere"):
        lease(store).acquire()
    assert Holder(**{**elsewhere, "boot": here["boot"]}).gone()  # on this kernel: it is gone


def test_the_lease_of_a_live_run_in_another_pid_namespace_is_not_taken(tmp_path: Path) -> None:
    """A run in a container on this host (its own PID namespace, the same host name) is pid 1
    there; here pid 1 is another process. The holder is alive: its lease is not free."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to start a process in a new PID namespace")
    proc = subprocess.Popen([unshare, "--pid", "--fork", "--kill-child", "--mount-proc",
                             sys.executable, "-c", HOLD, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(ConcurrentRunError, match="a run"):
            lease(LocalStore(tmp_path)).acquire()
        doc = json.loads(LocalStore(tmp_path).get("state/leases/decode/0000000001.json"))
        assert doc["holder"]["pid"] == 1
        assert doc["holder"]["pidns"] != os.readlink("/proc/self/ns/pid")
    finally:
        proc.kill()
        proc.wait()
