"""wal-push semantics (pgBackRest's archive-push) over the directory backend, and its CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdclake.archive.compress import compress, decompress
from cdclake.archive.layout import Layout, WalFileKind
from cdclake.archive.local import LocalStore
from cdclake.archive.manifest import Manifest, SystemInfo
from cdclake.archive.push import EXIT_CONFLICT, push_wal_file
from cdclake.cli import main
from cdclake.errors import ArchiveConflictError, WalCorruptError, WalError
from tests.support.walfiles import MB, SYSID, history_text, segment_bytes, sha

SEG = "000000010000000000000003"


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def push(store: LocalStore, name: str, data: bytes, **kw: bool):  # type: ignore[no-untyped-def]
    return push_wal_file(store, Layout(), name, data, **kw)


def test_push_stores_segment_manifest_and_identity(store: LocalStore) -> None:
    data = segment_bytes(1, 3)
    result = push(store, SEG, data)
    assert (result.uploaded, result.kind, result.key, result.sha256) == (
        True, WalFileKind.SEGMENT, f"wal/{SEG}", sha(data))
    assert store.get(f"wal/{SEG}") == data
    entry = Manifest(store, Layout()).get(SEG)
    assert entry is not None and entry == result.entry
    assert (entry.sha256, entry.size, entry.first_lsn, entry.shipped_by, entry.compressed) == (
        sha(data), MB, 3 * MB, "wal-push", False)
    assert Manifest(store, Layout()).system() == SystemInfo(SYSID, 15, MB)


def test_same_content_again_is_success_without_rewriting(store: LocalStore) -> None:
    data = segment_bytes(1, 3)
    first = push(store, SEG, data)
    mtime = (store.root / "wal" / SEG).stat().st_mtime_ns
    again = push(store, SEG, data)
    assert again.uploaded is False and again.entry == first.entry
    assert (store.root / "wal" / SEG).stat().st_mtime_ns == mtime


def test_different_content_is_a_conflict_and_changes_nothing(store: LocalStore) -> None:
    ours = segment_bytes(1, 3)
    push(store, SEG, ours)
    before = {o.key: store.get(o.key) for o in store.list()}
    theirs = segment_bytes(1, 3, salt=b"other primary")
    with pytest.raises(ArchiveConflictError) as exc:
        push(store, SEG, theirs)
    msg = str(exc.value)
    assert SEG in msg and sha(ours) in msg and sha(theirs) in msg
    assert "multiple primaries" in msg
    assert {o.key: store.get(o.key) for o in store.list()} == before


def test_segment_uploaded_but_not_recorded_is_completed(store: LocalStore) -> None:
    """A crash between the segment's upload and its manifest entry heals on the retry."""
    data = segment_bytes(1, 3)
    store.put(f"wal/{SEG}", data)
    result = push(store, SEG, data)
    assert result.uploaded is False
    assert Manifest(store, Layout()).names() == [SEG]


def test_compressed_push_and_cross_form_identity(store: LocalStore) -> None:
    data = segment_bytes(1, 3)
    result = push(store, SEG, data, compress=True)
    assert result.key == f"wal/{SEG}.zst" and result.entry is not None
    assert result.entry.compressed and result.entry.sha256 == sha(data)
    assert decompress(store.get(f"wal/{SEG}.zst"), "t") == data
    # the same segment pushed plain later is the same file: success, no second copy
    assert push(store, SEG, data).uploaded is False
    assert store.head(f"wal/{SEG}") is None
    with pytest.raises(ArchiveConflictError, match=f"{SEG}.zst"):
        push(store, SEG, segment_bytes(1, 3, salt=b"x"))
    # and the other way round
    other = "000000010000000000000004"
    push(store, other, segment_bytes(1, 4))
    assert push(store, other, segment_bytes(1, 4), compress=True).key == f"wal/{other}"
    assert store.head(f"wal/{other}.zst") is None


def test_a_segment_of_another_cluster_is_refused(store: LocalStore) -> None:
    push(store, SEG, segment_bytes(1, 3))
    with pytest.raises(ArchiveConflictError, match="two clusters cannot share"):
        push(store, "000000010000000000000004", segment_bytes(1, 4, sysid=99))
    assert store.head("wal/000000010000000000000004") is None


def test_a_file_that_is_not_the_named_segment_is_refused(store: LocalStore) -> None:
    with pytest.raises(WalCorruptError, match="does not match the file name"):
        push(store, SEG, segment_bytes(1, 4))
    assert list(store.list()) == []


def test_history_partial_and_backup_files(store: LocalStore) -> None:
    hist = history_text((1, 3 * MB + 0x28)).encode()
    r = push(store, "00000002.history", hist)
    assert (r.kind, r.key, r.entry) == (WalFileKind.HISTORY, "wal/00000002.history", None)
    assert push(store, "00000002.history", hist).uploaded is False
    with pytest.raises(ArchiveConflictError):
        push(store, "00000002.history", history_text((1, 4 * MB)).encode())
    with pytest.raises(WalError, match="malformed timeline history"):
        push(store, "00000003.history", b"garbage\n")
    assert push(store, "00000002.history", hist, compress=True).key == "wal/00000002.history"
    assert push(store, "00000004.history", hist, compress=True).key == "wal/00000004.history"
    partial = push(store, SEG + ".partial", segment_bytes(1, 3), compress=True)
    assert partial.key == f"wal/{SEG}.partial"
    assert partial.kind is WalFileKind.PARTIAL and partial.entry is None
    backup = push(store, SEG + ".00000028.backup", b"START WAL LOCATION: 0/3000028\n")
    assert backup.key == f"wal/{SEG}.00000028.backup"
    assert Manifest(store, Layout()).names() == []  # only full segments get entries


def test_wal_of_an_abandoned_timeline_branch_is_refused(store: LocalStore) -> None:
    """After a failover timeline 2's history says timeline 1 ended 0xA0 bytes into segment
    3. The old primary, still writing timeline 1, pushes segments from there on: each is
    refused and nothing is stored. Its copy of the switch segment (WAL before the switch is
    the stream's) and the new primary's segments are archived."""
    switch = 3 * MB + 0xA0
    push(store, "000000010000000000000002", segment_bytes(1, 2))
    push(store, "00000002.history", history_text((1, switch)).encode())
    assert push(store, SEG, segment_bytes(1, 3)).uploaded
    assert push(store, SEG + ".partial", segment_bytes(1, 3, salt=b"partial")).uploaded
    before = {o.key: store.get(o.key) for o in store.list()}
    for name, compressed in (("000000010000000000000004", False),
                             ("000000010000000000000004.partial", False),
                             ("000000010000000000000005", True)):
        with pytest.raises(ArchiveConflictError) as err:
            push(store, name, segment_bytes(1, int(name[16:24], 16)), compress=compressed)
        msg = str(err.value)
        for part in (f"WAL file {name} ", "on timeline 1 ", "0/3000A0", "00000002.history",
                     "abandoned branch"):
            assert part in msg, part
    assert {o.key: store.get(o.key) for o in store.list()} == before
    assert push(store, "000000020000000000000003", segment_bytes(2, 3)).uploaded
    assert push(store, "000000020000000000000004", segment_bytes(2, 4)).uploaded
    # a third timeline that branched off timeline 1 later makes timeline 2 the abandoned one
    push(store, "00000003.history", history_text((1, 5 * MB)).encode())
    assert push(store, "000000010000000000000004", segment_bytes(1, 4)).uploaded
    with pytest.raises(ArchiveConflictError, match="on timeline 2 at or past 0/3000A0"):
        push(store, "000000020000000000000005", segment_bytes(2, 5))


def test_unknown_file_names_are_refused(store: LocalStore) -> None:
    with pytest.raises(WalError, match="not a file PostgreSQL archives"):
        push(store, "postgresql.conf", b"x")


# -- CLI ------------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory as archive_command sees it: cwd, with %p = pg_wal/<name>."""
    d = tmp_path / "data"
    (d / "pg_wal").mkdir(parents=True)
    monkeypatch.chdir(d)
    monkeypatch.setenv("CDCLAKE_STORE_URL", (tmp_path / "store").as_uri())
    return d


def test_cli_exit_codes(data_dir: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    (data_dir / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3))
    assert main(["wal-push", f"pg_wal/{SEG}"]) == 0
    assert main(["wal-push", f"pg_wal/{SEG}", "--verbose"]) == 0
    assert "already stored, same sha256" in capsys.readouterr().err
    (data_dir / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3, salt=b"diverged"))
    assert main(["wal-push", f"pg_wal/{SEG}"]) == EXIT_CONFLICT
    assert f"conflict: WAL file {SEG}" in capsys.readouterr().err
    assert main(["wal-push", "pg_wal/000000010000000000000009"]) == 2
    assert "cannot read" in capsys.readouterr().err
    store = LocalStore(tmp_path / "store")
    assert store.get(f"wal/{SEG}") == segment_bytes(1, 3)


def test_cli_refuses_an_abandoned_branch_with_the_conflict_exit(
        data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wal = data_dir / "pg_wal"
    (wal / "00000002.history").write_text(history_text((1, 3 * MB + 0xA0)))
    (wal / "000000010000000000000004").write_bytes(segment_bytes(1, 4))
    assert main(["wal-push", "pg_wal/00000002.history"]) == 0
    assert main(["wal-push", "pg_wal/000000010000000000000004"]) == EXIT_CONFLICT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "cdclake wal-push: conflict: WAL file 000000010000000000000004 is on timeline 1")
    assert LocalStore(tmp_path / "store").head("wal/000000010000000000000004") is None
    assert (wal / "000000010000000000000004").read_bytes() == segment_bytes(1, 4)


def test_cli_store_failure_is_non_zero(data_dir: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store directory should be")
    monkeypatch.setenv("CDCLAKE_STORE_URL", blocker.as_uri())
    (data_dir / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3))
    assert main(["wal-push", f"pg_wal/{SEG}"]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert (data_dir / "pg_wal" / SEG).read_bytes() == segment_bytes(1, 3)


def test_wal_push_process_starts_fast_and_imports_nothing_heavy(data_dir: Path,
                                                               tmp_path: Path) -> None:
    (data_dir / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3))
    probe = (
        "import sys\n"
        "from cdclake.cli import main\n"
        f"rc = main(['wal-push', 'pg_wal/{SEG}', '--compress'])\n"
        "heavy = [m for m in ('pyspark', 'airflow', 'pyiceberg', 'great_expectations', "
        "'pyarrow', 'boto3') if m in sys.modules]\n"
        "print(rc, heavy)\n"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", probe], cwd=data_dir, capture_output=True,
                         text=True, check=True)
    elapsed = time.monotonic() - started
    assert out.stdout.strip() == "0 []", out.stderr
    assert elapsed < 5, f"wal-push took {elapsed:.1f}s to start and push"
    assert LocalStore(tmp_path / "store").exists(f"wal/{SEG}.zst")


def test_compress_round_trip_and_corrupt_input() -> None:
    data = segment_bytes(1, 3)
    packed = compress(data)
    assert len(packed) < len(data) // 10
    assert decompress(packed, "x") == data
    with pytest.raises(WalCorruptError, match="not a valid zstd"):
        decompress(packed[:-10], "s3://b/wal/x.zst")


def test_no_store_configured_archives_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without CDCLAKE_STORE_URL, wal-push (and ship) refuse: the default store is under the
    data directory, where PostgreSQL would recycle WAL archived nowhere."""
    d = tmp_path / "data"
    (d / "pg_wal").mkdir(parents=True)
    (d / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3))
    monkeypatch.chdir(d)
    monkeypatch.delenv("CDCLAKE_STORE_URL", raising=False)
    monkeypatch.delenv("CDCLAKE_CONFIG", raising=False)
    assert main(["wal-push", f"pg_wal/{SEG}"]) == 2
    assert main(["ship", "--from", str(d / "pg_wal")]) == 2
    err = capsys.readouterr().err
    assert "wal-push needs a store: set CDCLAKE_STORE_URL" in err
    assert "ship needs a store" in err
    assert sorted(p.name for p in d.iterdir()) == ["pg_wal"]


@pytest.mark.parametrize("url", ["archive", "relative/path", "./archive", "file:archive",
                                 "file:relative/path"])
def test_a_relative_store_archives_nothing_into_the_data_directory(
        url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """archive_command runs in the data directory: a relative store would be inside it, where
    PostgreSQL recycles WAL it believes archived. Refused in one line, nothing written."""
    (data_dir / "pg_wal" / SEG).write_bytes(segment_bytes(1, 3))
    monkeypatch.setenv("CDCLAKE_STORE_URL", url)
    assert main(["wal-push", f"pg_wal/{SEG}"]) == 2
    assert main(["ship", "--from", str(data_dir / "pg_wal")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"cdclake {command}: error: store URL {url!r} is a relative path, which "
                   "each command would resolve against the directory it runs in "
                   "(archive_command: the data directory): give an absolute path or "
                   "file:///absolute/path" for command in ("wal-push", "ship")]
    assert sorted(p.name for p in data_dir.iterdir()) == ["pg_wal"]
