"""Leases in the object store: one run at a time decodes a stream, one writes its lake.

Two overlapping runs (``cdclake run`` while the DAG runs, two DAGs on one stream) would plan the
same batch, delete each other's spill and change objects and overwrite each other's progress.
A lease makes the second one wait, then refuse, naming the holder.

The store has one atomic primitive both backends keep: create-if-absent. A lease is therefore
a sequence of *generations*, ``state/leases/<name>/<generation>.json``, each created once
with ``if_absent``; the newest generation is the lease. Taking it means creating the next
generation, which only one contender can do; the holder then renews by rewriting its own
generation with a later expiry (nobody else writes it), and releases by marking it released.
A generation newer than the holder's means the holder lost the lease (it stalled past the
expiry and another run took over): :meth:`Lease.check` says so before the holder commits.

A check is not a fence: a holder can pass it, stall, and act after another run took over. So
the generation is also a *fencing token* (:class:`Fence`): a holder writes and deletes only
objects whose key names its own generation (``.../g<generation>/...``,
:meth:`cdclake.archive.layout.Layout.generation`), and a commit that makes objects live — the
progress, created once with create-if-absent (:mod:`cdclake.stream.progress`) — names the
generation whose objects it takes. A stale holder can then only waste its own objects; it
cannot delete or overwrite the new holder's, and cannot commit over a newer run's progress.

Generation numbers are never reused, so a token names one holder for ever. Old generations
are deleted (the newest two stay), and create-if-absent of a deleted key succeeds: a
contender that read "newest = g" long ago and wakes up creates ``g + 1`` again. It is the
holder only if ``g + 1`` is then still the newest generation; when a newer one exists (it
must, since only the creator of ``g + 3`` deletes ``g + 1``) the contender deletes what it
created and looks again.

A lease expires ``ttl`` seconds after its last renewal, or at once when its holder's process
is gone — judged only for a holder on this very kernel and in this PID namespace (same host
name, same boot id, same ``/proc/self/ns/pid``): containers that share a host name, or the
host's kernel, see other processes under the same ids, and a holder there waits out its
``ttl``. A run killed with SIGKILL does not keep the next one on its host waiting. Clocks of
different hosts must agree to well within ``ttl``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectStore
from cdclake.errors import ConcurrentRunError, ObjectNotFound

log = logging.getLogger(__name__)

#: the leases a stream has: decoding (progress, spill and change objects) and the lake
#: (the initial snapshot and the merge write the Iceberg tables)
DECODE = "decode"
LAKE = "lake"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), to tell it from a later process
    that reuses its id; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat.rsplit(b")", 1)[1].split()[19].decode()


def _read_link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _boot_id() -> str | None:
    """This kernel's boot id: the same in every container on the host, new at each boot;
    another host with the same name (containers named alike) has another."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: enough to tell a user, and to see that a local holder is gone."""

    host: str
    pid: int
    started: str | None  #: :func:`_process_start` of ``pid``
    token: str  #: this acquisition's own id
    purpose: str
    boot: str | None = None  #: :func:`_boot_id` (None: unknown, never judged gone)
    pidns: str | None = None  #: ``/proc/self/ns/pid`` (e.g. ``pid:[4026531836]``)

    @classmethod
    def me(cls, purpose: str) -> Holder:
        return cls(socket.gethostname(), os.getpid(), _process_start(os.getpid()),
                   uuid.uuid4().hex, purpose, _boot_id(), _read_link("/proc/self/ns/pid"))

    def gone(self) -> bool:
        """Whether the holder ran in this PID namespace of this kernel and its process no
        longer exists. A pid means a process only inside its namespace: the same number on
        another host, or in another container here, is another process (or none)."""
        here = (socket.gethostname(), _boot_id(), _read_link("/proc/self/ns/pid"))
        return (None not in (self.boot, self.pidns) and (self.host, self.boot, self.pidns) == here
                and _process_start(self.pid) != self.started)

    def describe(self) -> str:
        return f"{self.purpose} (pid {self.pid} on {self.host})"


class Fence(Protocol):
    """What a writer is given to fence its objects and commits: the generation its keys name,
    and the check to make before it commits (:class:`Lease`, or :data:`UNFENCED`)."""

    @property
    def generation(self) -> int: ...

    def check(self) -> None: ...


class Unfenced:
    """What a writer that holds no lease is given instead (a dry run, which writes nothing; a
    test or one-off call of a step's function): its objects are generation 0's, and nothing
    stops it. A context manager, as a :class:`Lease` is."""

    generation = 0

    def __enter__(self) -> Unfenced:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def check(self) -> None:
        pass


UNFENCED = Unfenced()


def _key(prefix: str, generation: int) -> str:
    return f"{prefix}{generation:010d}.json"


def _generations(store: ObjectStore, prefix: str) -> list[int]:
    out = []
    for info in store.list(prefix):
        stem = info.key[len(prefix):].removesuffix(".json")
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def _newest(store: ObjectStore, prefix: str) -> tuple[int, dict[str, Any] | None]:
    """The newest generation and its document (None: none yet, or it vanished)."""
    generations = _generations(store, prefix)
    if not generations:
        return 0, None
    newest = generations[-1]
    try:
        return newest, json.loads(store.get(_key(prefix, newest)))
    except (ObjectNotFound, ValueError):
        return newest, None


def _live(doc: dict[str, Any] | None, now: float) -> Holder | None:
    """The holder of a generation that still holds at ``now``, else None."""
    if doc is None or doc.get("released") or float(doc.get("expires", 0)) <= now:
        return None
    try:
        holder = Holder(**doc["holder"])
    except (KeyError, TypeError):
        return None
    return None if holder.gone() else holder


def holder_of(store: ObjectStore, name: str, layout: Layout | None = None
              ) -> dict[str, Any] | None:
    """Who holds lease ``name`` now and until when (``cdclake status``); None when free."""
    _gen, doc = _newest(store, (layout or Layout()).lease_prefix(name))
    holder = _live(doc, time.time())
    if holder is None or doc is None:
        return None
    return {"holder": holder.describe(),
            "until": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(doc["expires"])))}


class Lease:
    """A held lease, renewed in the background until released.

    ``acquire`` waits up to ``wait`` seconds for a live holder to finish, then raises
    :class:`~cdclake.errors.ConcurrentRunError`. Use as a context manager.
    """

    def __init__(self, store: ObjectStore, name: str, *, purpose: str, ttl: float,
                 wait: float, layout: Layout | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.name = name
        self.prefix = (layout or Layout()).lease_prefix(name)
        self.ttl = ttl
        self.wait = wait
        self.clock = clock
        self.holder = Holder.me(purpose)
        self.generation = 0
        self.expires = 0.0
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- the generations in the store -------------------------------------------------------

    def _key(self, generation: int) -> str:
        return _key(self.prefix, generation)

    def _newest(self) -> tuple[int, dict[str, Any] | None]:
        return _newest(self.store, self.prefix)

    def _document(self, *, released: bool = False) -> bytes:
        return json.dumps({"holder": self.holder.__dict__, "expires": self.expires,
                           "released": released}, sort_keys=True).encode()

    def _live(self, doc: dict[str, Any] | None) -> Holder | None:
        return _live(doc, self.clock())

    # -- acquire, renew, release --------------------------------------------------------------

    def acquire(self) -> Lease:
        deadline = self.clock() + self.wait
        while True:
            newest, doc = self._newest()
            holder = self._live(doc)
            if holder is None:
                self.expires = self.clock() + self.ttl
                created = newest + 1
                if self.store.put(self._key(created), self._document(), if_absent=True):
                    if _generations(self.store, self.prefix)[-1] != created:
                        # a number deleted long ago, created again from a stale look: never
                        # held by this run (its holder's objects name it), so given back
                        self.store.delete(self._key(created))
                        continue
                    self.generation = created
                    self._forget_before(newest)
                    self._start_renewing()
                    return self
                continue  # another contender created it first: look again
            if self.clock() >= deadline:
                until = time.strftime("%H:%M:%S", time.gmtime(float(doc["expires"])))  # type: ignore[index]
                raise ConcurrentRunError(
                    f"another run holds the {self.name} lease of {self.store.url(self.prefix)}: "
                    f"{holder.describe()}, renewed until {until} UTC; waited {self.wait:g}s "
                    "(CDCLAKE_LEASE_WAIT) — try again when it has finished")
            log.info("waiting for the %s lease held by %s", self.name, holder.describe())
            time.sleep(min(1.0, max(0.05, deadline - self.clock())))

    def _forget_before(self, generation: int) -> None:
        """Delete generations older than ``generation`` (kept: the one just superseded, for
        whoever wants to see who ran last)."""
        for old in _generations(self.store, self.prefix):
            if old < generation:
                self.store.delete(self._key(old))

    def _start_renewing(self) -> None:
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                         name=f"cdclake-lease-{self.name}")
        self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.renew()
            except Exception as exc:  # the store failed: the expiry check in check() decides
                log.warning("could not renew the %s lease: %s", self.name, exc)
            if self._lost:
                return

    def renew(self) -> None:
        newest, _doc = self._newest()
        if newest != self.generation:
            self._lost = f"generation {newest} superseded this run's {self.generation}"
            return
        self.expires = self.clock() + self.ttl
        self.store.put(self._key(self.generation), self._document())

    @property
    def lost(self) -> bool:
        """Whether this holder is known to have lost the lease (its renewal found a newer
        generation, or :meth:`check` did)."""
        return self._lost is not None

    def check(self) -> None:
        """Raise :class:`~cdclake.errors.ConcurrentRunError` unless the lease is still held:
        call it before committing anything a newer holder may have done instead.

        A lease that expired while the whole process stood still (a paused VM, a starved
        host: the renewer could not run either) is still held when no newer generation
        exists — nobody took over — and is renewed here, as the renewer would on waking. A
        contender taking over at this very moment is what the fencing tokens are for: the
        commit after this check names this run's generation and cannot overwrite its."""
        if self._lost is None and self.clock() >= self.expires:
            self.renew()
        if self._lost is None:
            newest, _doc = self._newest()
            if newest != self.generation:
                self._lost = f"generation {newest} superseded this run's {self.generation}"
        if self._lost is not None:
            raise ConcurrentRunError(f"this run lost the {self.name} lease of "
                                     f"{self.store.url(self.prefix)} ({self._lost}); another "
                                     "run took over, and nothing more is committed by this one")

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        if self.generation and self._lost is None:
            newest, _doc = self._newest()
            if newest == self.generation:
                self.store.put(self._key(self.generation), self._document(released=True))
        self.generation = 0
