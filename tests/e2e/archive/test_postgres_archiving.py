"""Real PostgreSQL (15 and 18) archiving through ``cdclake wal-push %p`` into S3 over HTTP,
and ``cdclake ship`` of the real segments it archived.

The cluster's archive_command copies each file into its archive directory and then pushes it
with wal-push, so one cluster gives both the store written by PostgreSQL's archiver and an
archive directory of real segments to ship.
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
from cdclake.archive.ship import ship
from cdclake.config import Config
from cdclake.errors import ArchiveGapError, StoreUnreachableError
from cdclake.local.postgres import OWNER, LocalPostgres, free_port
from cdclake.local.s3 import LocalS3

pytestmark = pytest.mark.e2e

ARCHIVE_TIMEOUT = 90.0  # the archiver waits up to 60 s between rounds after a failure


@dataclass
class ArchivingCluster:
    pg: LocalPostgres
    config: Config  #: where its archive_command pushes
    store: ObjectStore


@pytest.fixture(scope="module", params=[15, 18], ids=["pg15", "pg18"])
def cluster(request: pytest.FixtureRequest, local_s3: LocalS3) -> Iterator[ArchivingCluster]:
    version = request.param
    config = local_s3.config(prefix=f"pg{version}-{os.getpid()}/stream")
    base = Path(tempfile.mkdtemp(prefix=f"cdclake-archiving-pg{version}-"))
    run_as = OWNER if os.geteuid() == 0 else None
    command = (f"cp %p {base / 'archive'}/%f && "
               + wal_push_command(config, run_as=run_as, verbose=True,
                                  credentials=base / "wal-push.toml"))
    pg = LocalPostgres.create(version, base_dir=base, archive_command=command,
                              wal_segsize_mb=1)
    try:
        pg.start()
        yield ArchivingCluster(pg, config, open_store(config))
    finally:
        pg.destroy()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archiver(pg: LocalPostgres) -> tuple[str | None, int, str | None, int]:
    row = pg.sql("SELECT last_archived_wal, archived_count, last_failed_wal, failed_count "
                 "FROM pg_stat_archiver")[0]
    return row[0], int(row[1]), row[2], int(row[3])


def write_wal(pg: LocalPostgres, i: int = 0) -> str:
    """Write a little WAL; the name of the segment it went into."""
    pg.sql("SELECT pg_logical_emit_message(false, 'cdclake-test', repeat(%s, 2000))",
           params=(str(i),))
    # the insert position, not pg_current_wal_lsn(): after a switch the write position sits
    # on the boundary, which pg_walfile_name maps to the previous segment
    return str(pg.sql("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")[0][0])


def switch_segments(pg: LocalPostgres, count: int) -> list[str]:
    """Write a little WAL and switch ``count`` times; the names of the segments completed."""
    done = []
    for i in range(count):
        done.append(write_wal(pg, i))
        pg.sql("SELECT pg_switch_wal()")
    return done


def wait_for(condition, what: str, pg: LocalPostgres) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + ARCHIVE_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            log = pg.log_file.read_text(errors="replace")[-3000:]
            raise AssertionError(f"timed out waiting for {what}; archiver {archiver(pg)}\n{log}")
        time.sleep(0.2)


def test_every_archived_segment_is_in_the_store_with_its_sha256(
        cluster: ArchivingCluster) -> None:
    pg, store = cluster.pg, cluster.store
    completed = switch_segments(pg, 4)
    wait_for(lambda: archiver(pg)[0] == completed[-1], f"{completed[-1]} archived", pg)
    assert archiver(pg)[3] == 0  # no failed attempt
    archived = sorted(p for p in pg.archive_dir.iterdir()
                      if wal_file_kind(p.name) is WalFileKind.SEGMENT)
    assert {p.name for p in archived} >= set(completed)
    manifest = Manifest(store, Layout())
    for path in archived:
        assert store.content_sha256(f"wal/{path.name}") == sha(path), path.name
        entry = manifest.get(path.name)
        assert entry is not None and entry.sha256 == sha(path) and entry.size == 1 << 20
        assert entry.shipped_by == "wal-push"
    system = manifest.system()
    assert system is not None and (system.pg_version, system.segment_size) == (
        pg.version, 1 << 20)
    sysid = pg.sql("SELECT system_identifier FROM pg_control_system()")[0][0]
    assert system.system_id == int(sysid)


def test_conflicting_segment_makes_postgresql_keep_it_and_retry(
        cluster: ArchivingCluster) -> None:
    pg, store = cluster.pg, cluster.store
    wait_for(lambda: not list((pg.wal_dir / "archive_status").glob("*.ready")),
             "the archiver to be idle", pg)
    name = write_wal(pg)
    assert store.head(f"wal/{name}") is None
    store.put(f"wal/{name}", b"a segment another primary wrote")
    failed_before = archiver(pg)[3]
    pg.sql("SELECT pg_switch_wal()")
    wait_for(lambda: archiver(pg)[3] > failed_before and archiver(pg)[2] == name,
             f"archiving {name} to fail", pg)
    assert archiver(pg)[0] != name
    assert (pg.wal_dir / name).exists()
    assert (pg.wal_dir / "archive_status" / f"{name}.ready").exists()
    assert store.get(f"wal/{name}") == b"a segment another primary wrote"
    assert f"cdclake wal-push: conflict: WAL file {name}" in pg.log_file.read_text()
    # the operator resolves it: PostgreSQL's next retry archives the real segment
    store.delete(f"wal/{name}")
    switch_segments(pg, 1)  # a new .ready wakes the archiver
    wait_for(lambda: archiver(pg)[0] is not None and archiver(pg)[0] > name,
             f"{name} to be archived after the conflict was resolved", pg)
    assert store.content_sha256(f"wal/{name}") == sha(pg.archive_dir / name)


def test_ship_real_segments_with_a_gap_then_resume(cluster: ArchivingCluster,
                                                   local_s3: LocalS3, tmp_path: Path) -> None:
    pg = cluster.pg
    completed = switch_segments(pg, 4)
    wait_for(lambda: archiver(pg)[0] == completed[-1], f"{completed[-1]} archived", pg)
    source = tmp_path / "archive"
    source.mkdir()
    for p in pg.archive_dir.iterdir():
        if wal_file_kind(p.name) is WalFileKind.SEGMENT:
            shutil.copy(p, source / p.name)
    names = sorted(p.name for p in source.iterdir())
    assert len(names) >= 5
    middle = names[len(names) // 2]
    held = tmp_path / middle
    (source / middle).rename(held)

    config = local_s3.config(Config(home=tmp_path / "home"), prefix=f"ship-{pg.version}/s")
    store = open_store(config)
    with pytest.raises(ArchiveGapError, match=f"WAL segment {middle} is missing"):
        ship(config, source)
    before = names[: names.index(middle)]
    assert Manifest(store, Layout()).names() == before
    assert [o.key for o in store.list("wal/")] == [f"wal/{n}" for n in before]

    held.rename(source / middle)
    report = ship(config, source)
    assert report.shipped == names[names.index(middle):]
    for n in names:
        assert store.content_sha256(f"wal/{n}") == sha(source / n)
    again = ship(config, source)
    assert again.shipped == [] and again.unchanged == [] and again.plan.already == names


def test_unreachable_store_fails_loudly_and_loses_nothing(cluster: ArchivingCluster,
                                                          local_s3: LocalS3,
                                                          tmp_path: Path) -> None:
    pg = cluster.pg
    segment = sorted(p for p in pg.archive_dir.iterdir()
                     if wal_file_kind(p.name) is WalFileKind.SEGMENT)[-1]
    before = sha(segment)
    down = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, **local_s3.env("down/s"), "CDCLAKE_S3_ENDPOINT_URL": down}
    cdclake = Path(sys.executable).with_name("cdclake")
    out = subprocess.run([str(cdclake), "wal-push", segment.name], cwd=pg.archive_dir,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert f"S3 endpoint {down} is unreachable" in out.stderr
    assert sha(segment) == before

    source = tmp_path / "archive"
    source.mkdir()
    shutil.copy(segment, source / segment.name)
    config = local_s3.config(Config(home=tmp_path / "home"), prefix=f"down-{pg.version}/s")
    with pytest.raises(StoreUnreachableError, match=down):
        ship(config.replace(s3_endpoint_url=down), source)
    assert sha(source / segment.name) == before
    assert ship(config, source).shipped == [segment.name]
