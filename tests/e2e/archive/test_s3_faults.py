"""S3 failing under cdclake: 500s, 503 SlowDown, dropped connections, half responses.

A fault-injecting proxy (:mod:`faultproxy`) stands between cdclake and moto_server and fails
requests on a fixed schedule. What must hold:

- ``wal-push`` run by a real PostgreSQL archiver, and ``cdclake ship``, store every segment
  intact (byte for byte, read back from moto directly) although a third (a half) of their
  requests fail: PostgreSQL never even sees a failed archive_command;
- reading the archive (listing the manifest, getting entries and segments) survives the same;
- a fault that outlasts the retry budget fails the command with one line naming the failure,
  the endpoint and the object, exit status 2 and no traceback, leaves nothing that looks
  complete but is not, and a re-run once the store is healthy completes;
- an endpoint that ignores ``If-None-Match`` (the proxy strips it) is refused by wal-push,
  naming it, before it replaces anything.

Every fault counted here really happened (the proxy counts them) and every one was followed
by the same request again (the proxy's log), so passing means "retried", not "lucky".
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdclake.archive import ObjectStore, open_store
from cdclake.archive.command import wal_push_command
from cdclake.archive.layout import Layout, WalFileKind, wal_file_kind
from cdclake.archive.manifest import Manifest
from cdclake.archive.s3 import S3Store
from cdclake.config import Config
from cdclake.errors import StoreUnreachableError
from cdclake.local.postgres import OWNER, LocalPostgres
from cdclake.local.s3 import LocalS3
from tests.e2e.archive.faultproxy import Fault, FaultProxy, Rule

pytestmark = pytest.mark.e2e

ARCHIVE_TIMEOUT = 60.0
SEGMENT = 1 << 20
#: faults taken in turn by the "every Nth request" rules
ALL_FAULTS = (Fault.INTERNAL_ERROR, Fault.SLOW_DOWN, Fault.DROP, Fault.DROP_AFTER,
              Fault.HALF_BODY)
ATTEMPTS = S3Store("b").max_attempts  # the retry budget: attempts per request
CDCLAKE = Path(sys.executable).with_name("cdclake")


@dataclass
class Cluster:
    pg: LocalPostgres
    config: Config  #: where its archive_command pushes: through ``proxy``
    proxy: FaultProxy
    moto: ObjectStore  #: the same stream read from moto directly, past the proxy


@pytest.fixture(scope="module")
def cluster(local_s3: LocalS3) -> Iterator[Cluster]:
    """PostgreSQL 15 archiving with ``cp`` to its archive directory, then ``cdclake
    wal-push`` through a fault proxy of its own."""
    base = Path(tempfile.mkdtemp(prefix="cdclake-faults-pg15-"))
    with FaultProxy(local_s3.endpoint_url) as proxy:
        direct = local_s3.config(prefix=f"faults-{os.getpid()}/pg15")
        config = direct.replace(s3_endpoint_url=proxy.url)
        run_as = OWNER if os.geteuid() == 0 else None
        command = (f"cp %p {base / 'archive'}/%f && "
                   + wal_push_command(config, run_as=run_as, verbose=True,
                                      credentials=base / "wal-push.toml"))
        pg = LocalPostgres.create(15, base_dir=base, archive_command=command,
                                  wal_segsize_mb=1)
        try:
            pg.start()
            yield Cluster(pg, config, proxy, open_store(direct))
        finally:
            pg.destroy()


@pytest.fixture
def proxy(local_s3: LocalS3) -> Iterator[FaultProxy]:
    with FaultProxy(local_s3.endpoint_url) as p:
        yield p


@pytest.fixture
def segments(cluster: Cluster, tmp_path: Path) -> list[Path]:
    """At least five real 1 MB segments, copied into an archive directory of our own."""
    pg = cluster.pg
    if len(archived_segments(pg)) < 5:
        wait_archived(pg, switch_segments(pg, 5)[-1])
    source = tmp_path / "archive"
    source.mkdir()
    for p in archived_segments(pg):
        shutil.copy(p, source / p.name)
    return sorted(source.iterdir())


# -- helpers --------------------------------------------------------------------------------


def archived_segments(pg: LocalPostgres) -> list[Path]:
    return sorted(p for p in pg.archive_dir.iterdir()
                  if wal_file_kind(p.name) is WalFileKind.SEGMENT)


def archiver(pg: LocalPostgres) -> tuple[str | None, int, int]:
    row = pg.sql("SELECT last_archived_wal, archived_count, failed_count "
                 "FROM pg_stat_archiver")[0]
    return row[0], int(row[1]), int(row[2])


def switch_segments(pg: LocalPostgres, count: int) -> list[str]:
    """Write a little WAL and switch ``count`` times; the names of the segments completed."""
    done = []
    for i in range(count):
        pg.sql("SELECT pg_logical_emit_message(false, 'cdclake-faults', repeat(%s, 2000))",
               params=(str(i),))
        done.append(str(pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0]))
        pg.sql("SELECT pg_switch_wal()")
    return done


def wait_archived(pg: LocalPostgres, name: str) -> None:
    deadline = time.monotonic() + ARCHIVE_TIMEOUT
    while archiver(pg)[0] != name:
        if time.monotonic() > deadline:
            log = pg.log_file.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{name} not archived; archiver {archiver(pg)}\n{log}")
        time.sleep(0.2)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_stored_intact(moto: ObjectStore, files: list[Path], shipped_by: str) -> None:
    """Each file is in moto byte for byte, with a manifest entry naming its sha256."""
    manifest = Manifest(moto, Layout())
    for path in files:
        data = path.read_bytes()
        assert len(data) == SEGMENT, path.name
        assert moto.get(f"wal/{path.name}") == data, path.name
        assert moto.content_sha256(f"wal/{path.name}") == sha(data), path.name
        entry = manifest.get(path.name)
        assert entry is not None, path.name
        assert (entry.sha256, entry.size, entry.shipped_by) == (sha(data), SEGMENT, shipped_by)


def assert_all_retried(proxy: FaultProxy, kinds: tuple[Fault, ...] = ALL_FAULTS) -> None:
    """Every kind of fault hit a request that had to be retried (not just half of a 404's
    body), and each injected fault was followed by the same request again."""
    hurt = {e.fault for e in proxy.faulted()
            if not (e.fault is Fault.HALF_BODY and (e.status or 0) >= 300)}
    assert hurt >= set(kinds), proxy.injected
    assert proxy.unretried() == []


def cli(proxy: FaultProxy, local_s3: LocalS3, prefix: str, tmp_path: Path, *args: str,
        cwd: Path | None = None, **settings: str) -> subprocess.CompletedProcess[str]:
    """``cdclake ARGS`` with the store at ``prefix``, reached through ``proxy`` (and any
    other ``CDCLAKE_*`` ``settings``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update(local_s3.env(prefix), CDCLAKE_S3_ENDPOINT_URL=proxy.url,
               CDCLAKE_HOME=str(tmp_path / "home"), **settings)
    return subprocess.run([str(CDCLAKE), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def one_error_line(out: subprocess.CompletedProcess[str], command: str) -> str:
    """The command failed with status 2 and exactly one line on stderr, no traceback."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"cdclake {command}: error: "), lines[0]
    return lines[0]


def attempts_at(proxy: FaultProxy, method: str, key_suffix: str) -> int:
    return sum(1 for e in proxy.exchanges
               if e.method == method and e.path.split("?")[0].endswith(key_suffix))


# -- faults the retries absorb --------------------------------------------------------------


def test_postgresql_archiver_never_sees_a_fault(cluster: Cluster) -> None:
    """Every 2nd PUT or HEAD of wal-push fails (each fault in turn) and every 2nd GET is cut
    half way: all segments land intact and pg_stat_archiver records no failed attempt."""
    pg, proxy = cluster.pg, cluster.proxy
    # rules on requests of their own: each fault in turn whatever a push asks (the
    # If-None-Match probe included), no kind lost to the other rule firing first
    proxy.schedule(Rule(ALL_FAULTS, method="PUT|HEAD", every=2),
                   Rule(Fault.HALF_BODY, method="GET", every=2))
    try:
        completed = switch_segments(pg, 5)
        wait_archived(pg, completed[-1])
    finally:
        proxy.heal()  # later tests archive without faults
    faults = sum(proxy.injected.values())
    assert archiver(pg)[2] == 0, f"{faults} faults, archiver {archiver(pg)}"
    assert faults >= 8
    assert_all_retried(proxy)
    archived = archived_segments(pg)
    assert {p.name for p in archived} >= set(completed)
    assert_stored_intact(cluster.moto, archived, "wal-push")


def test_ship_through_every_other_request_failing(
        segments: list[Path], proxy: FaultProxy, local_s3: LocalS3, tmp_path: Path) -> None:
    proxy.schedule(Rule(ALL_FAULTS, every=2))
    prefix = f"faults-{os.getpid()}/ship"
    # one upload at a time: "every other request" then means every retry of a request is
    # answered (uploads side by side could meet three faults in a row on one request)
    out = cli(proxy, local_s3, prefix, tmp_path, "ship", "--from", str(segments[0].parent),
              CDCLAKE_SHIP_UPLOADS="1")
    assert out.returncode == 0, out.stderr
    assert f"to {local_s3.store_url(prefix)}" in out.stderr
    assert sum(proxy.injected.values()) >= 2 * len(segments)
    assert_all_retried(proxy)
    moto = open_store(local_s3.config(Config(home=tmp_path / "home"), prefix=prefix))
    assert_stored_intact(moto, segments, "ship")
    assert [o.key for o in moto.list("wal/")] == [f"wal/{p.name}" for p in segments]

    proxy.schedule()
    again = cli(proxy, local_s3, prefix, tmp_path, "ship", "--from", str(segments[0].parent))
    assert again.returncode == 0, again.stderr
    assert "shipped 0 file(s)" in again.stderr
    assert f"{len(segments)} already shipped" in again.stderr


def test_reading_the_archive_through_faults(cluster: Cluster, segments: list[Path],
                                            proxy: FaultProxy) -> None:
    """Listing the manifest, reading its entries and every segment, while every 2nd read
    fails and the first two segment bodies break off half way (S3Store.get fetches again)."""
    store = open_store(cluster.config.replace(s3_endpoint_url=proxy.url))
    proxy.schedule(Rule(Fault.HALF_BODY, method="GET", path=r"/wal/[0-9A-F]{24}$", limit=2),
                   Rule(ALL_FAULTS, method="GET|HEAD", every=2))
    manifest = Manifest(store, Layout())
    system = manifest.system()
    assert system is not None and system.segment_size == SEGMENT
    entries = {e.segment: e for e in manifest.entries()}
    by_name = {p.name: p for p in segments}
    assert set(entries) >= set(by_name)
    for name, path in by_name.items():
        data = store.get(entries[name].key)
        assert data == path.read_bytes(), name
        assert sha(data) == entries[name].sha256
        info = store.head(entries[name].key)
        assert info is not None and info.size == SEGMENT
    cut = [e for e in proxy.faulted() if e.fault is Fault.HALF_BODY and "/wal/" in e.path]
    assert len(cut) >= 2
    assert_all_retried(proxy)


# -- faults that outlast the retries --------------------------------------------------------


@pytest.mark.parametrize(("fault", "target", "message"), [
    (Fault.SLOW_DOWN, "wal", "S3 SlowDown from {url} (writing {key}, {n} attempts): "
                             "Please reduce your request rate."),
    (Fault.DROP, "manifest", "S3 endpoint {url} dropped the connection (writing {key}, "
                             "{n} attempts): Connection was closed before"),
    (Fault.DROP_AFTER, "wal", "S3 endpoint {url} dropped the connection (writing {key}, "
                              "{n} attempts): Connection was closed before"),
], ids=["503-on-segment", "drop-on-manifest-entry", "lost-answer-on-segment"])
def test_wal_push_gives_up_with_one_line_and_a_rerun_completes(
        segments: list[Path], proxy: FaultProxy, local_s3: LocalS3, tmp_path: Path,
        fault: Fault, target: str, message: str) -> None:
    """The segment's PUT (or its manifest entry's) always fails: wal-push exits 2 with one
    line after exactly the retry budget, the manifest does not list the segment (whatever
    the store holds is complete or absent), and PostgreSQL's next call stores it."""
    segment = segments[0]
    prefix = f"faults-{os.getpid()}/push-{fault.name.lower()}"
    key = f"wal/{segment.name}" if target == "wal" else f"manifest/wal/{segment.name}.json"
    proxy.schedule(Rule(fault, method="PUT", path=f"/{key}$"))
    out = cli(proxy, local_s3, prefix, tmp_path, "wal-push", "-v", segment.name,
              cwd=segment.parent)
    line = one_error_line(out, "wal-push")
    expected = message.format(url=proxy.url, key=local_s3.store_url(f"{prefix}/{key}"),
                              n=ATTEMPTS)
    assert expected in line, line
    assert attempts_at(proxy, "PUT", key) == ATTEMPTS == proxy.injected[fault]

    moto = open_store(local_s3.config(Config(home=tmp_path / "home"), prefix=prefix))
    assert Manifest(moto, Layout()).get(segment.name) is None
    stored = moto.head(f"wal/{segment.name}")
    if fault is Fault.SLOW_DOWN:  # the store never saw the segment
        assert stored is None
    else:  # it was stored (whole: S3 puts are atomic) before the entry or the answer failed
        assert moto.get(f"wal/{segment.name}") == segment.read_bytes()

    proxy.schedule()
    again = cli(proxy, local_s3, prefix, tmp_path, "wal-push", "-v", segment.name,
                cwd=segment.parent)
    assert again.returncode == 0, again.stderr
    done = "stored at" if stored is None else "already stored, same sha256"
    assert f"cdclake wal-push: {segment.name} {done}" in again.stderr
    assert_stored_intact(moto, [segment], "wal-push")


def test_ship_gives_up_at_the_failing_segment_and_a_rerun_completes(
        segments: list[Path], proxy: FaultProxy, local_s3: LocalS3, tmp_path: Path) -> None:
    bad = segments[2]
    prefix = f"faults-{os.getpid()}/ship-stuck"
    proxy.schedule(Rule(Fault.INTERNAL_ERROR, method="PUT", path=f"/wal/{bad.name}$"))
    out = cli(proxy, local_s3, prefix, tmp_path, "ship", "--from", str(bad.parent))
    line = one_error_line(out, "ship")
    key = local_s3.store_url(f"{prefix}/wal/{bad.name}")
    assert line == (f"cdclake ship: error: S3 InternalError from {proxy.url} (writing {key}, "
                    f"{ATTEMPTS} attempts): We encountered an internal error. Please try again.")
    assert attempts_at(proxy, "PUT", f"wal/{bad.name}") == ATTEMPTS

    moto = open_store(local_s3.config(Config(home=tmp_path / "home"), prefix=prefix))
    # nothing recorded past the failing segment; the uploads beside it (four at once) may
    # have stored later segments, which the rerun completes rather than uploads again
    assert Manifest(moto, Layout()).names() == [p.name for p in segments[:2]]
    stored = [o.key for o in moto.list("wal/")]
    assert stored[:2] == [f"wal/{p.name}" for p in segments[:2]]
    assert f"wal/{bad.name}" not in stored
    assert_stored_intact(moto, segments[:2], "ship")

    proxy.schedule()
    again = cli(proxy, local_s3, prefix, tmp_path, "ship", "--from", str(bad.parent))
    assert again.returncode == 0, again.stderr
    early = len(stored) - 2
    assert f"shipped {len(segments) - 2 - early} file(s)" in again.stderr
    assert (f"{early} were already stored" in again.stderr) == bool(early)
    assert_stored_intact(moto, segments, "ship")


def test_get_gives_up_when_every_body_breaks_off(cluster: Cluster, segments: list[Path],
                                                 proxy: FaultProxy) -> None:
    store = open_store(cluster.config.replace(s3_endpoint_url=proxy.url))
    name = segments[0].name
    proxy.schedule(Rule(Fault.HALF_BODY, method="GET", path=f"/wal/{name}$"))
    with pytest.raises(StoreUnreachableError) as err:
        store.get(f"wal/{name}")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        f"S3 endpoint {proxy.url} dropped the connection (reading "
        f"{store.url(f'wal/{name}')}, {ATTEMPTS} attempts): ")
    assert "IncompleteRead" in message
    assert attempts_at(proxy, "GET", f"wal/{name}") == ATTEMPTS == proxy.injected[Fault.HALF_BODY]


# -- an endpoint that ignores If-None-Match -------------------------------------------------


def test_a_store_that_ignores_if_none_match_is_refused(
        segments: list[Path], local_s3: LocalS3, tmp_path: Path) -> None:
    """Another primary's segment is stored under the name of ours. Through an endpoint that
    drops If-None-Match (the proxy strips it; the store then replaces what it holds),
    wal-push refuses the store with one line naming it, and nothing is replaced; through the
    same proxy relaying the header, it is the conflict it is (exit 3)."""
    segment = segments[0]
    prefix = f"faults-{os.getpid()}/ignores-if-none-match"
    moto = open_store(local_s3.config(Config(home=tmp_path / "home"), prefix=prefix))
    theirs = b"a segment another primary archived under this name"
    moto.put(f"wal/{segment.name}", theirs)
    with FaultProxy(local_s3.endpoint_url, drop=["If-None-Match"]) as ignoring:
        out = cli(ignoring, local_s3, prefix, tmp_path, "wal-push", "-v", segment.name,
                  cwd=segment.parent)
    line = one_error_line(out, "wal-push")
    assert f"S3 endpoint {ignoring.url} (bucket {local_s3.bucket}) ignores If-None-Match" in line
    assert moto.get(f"wal/{segment.name}") == theirs
    assert Manifest(moto, Layout()).get(segment.name) is None
    with FaultProxy(local_s3.endpoint_url) as faithful:
        out = cli(faithful, local_s3, prefix, tmp_path, "wal-push", "-v", segment.name,
                  cwd=segment.parent)
    assert out.returncode == 3, out.stderr
    assert f"cdclake wal-push: conflict: WAL file {segment.name}" in out.stderr
    assert moto.get(f"wal/{segment.name}") == theirs
