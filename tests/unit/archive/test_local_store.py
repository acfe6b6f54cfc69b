"""The directory backend: the ObjectStore contract, atomicity and if-absent races."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cdclake.archive.local import TMP_PREFIX, LocalStore
from cdclake.errors import ObjectNotFound, StoreError
from tests.support.walfiles import sha


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def test_put_get_head_delete_roundtrip(store: LocalStore) -> None:
    assert store.put("wal/000000010000000000000001", b"segment bytes") is True
    assert store.get("wal/000000010000000000000001") == b"segment bytes"
    info = store.head("wal/000000010000000000000001")
    assert info is not None
    assert (info.key, info.size, info.sha256) == (
        "wal/000000010000000000000001", 13, sha(b"segment bytes"))
    assert store.content_sha256("wal/000000010000000000000001") == sha(b"segment bytes")
    store.delete("wal/000000010000000000000001")
    assert store.head("wal/000000010000000000000001") is None
    store.delete("wal/000000010000000000000001")  # deleting a missing key is fine


def test_get_missing_names_key_and_store(store: LocalStore) -> None:
    with pytest.raises(ObjectNotFound, match=r"'state/progress.json'.*file://"):
        store.get("state/progress.json")
    assert store.content_sha256("state/progress.json") is None


def test_if_absent_never_overwrites(store: LocalStore) -> None:
    assert store.put("k", b"first", if_absent=True) is True
    assert store.put("k", b"second", if_absent=True) is False
    assert store.get("k") == b"first"
    assert store.put("k", b"third") is True  # plain put replaces
    assert store.get("k") == b"third"


def test_list_is_sorted_by_key_and_filters_by_string_prefix(store: LocalStore) -> None:
    for key in ("wal/b", "wal/a/x", "wal-c", "walrus", "manifest/m", "wal/a-z"):
        store.put(key, key.encode())
    # '-' sorts before '/', so a per-directory walk order would be wrong here
    assert [o.key for o in store.list("wal")] == [
        "wal-c", "wal/a-z", "wal/a/x", "wal/b", "walrus"]
    assert [o.key for o in store.list("wal/")] == ["wal/a-z", "wal/a/x", "wal/b"]
    assert [o.key for o in store.list("wal/a")] == ["wal/a-z", "wal/a/x"]
    assert [(o.key, o.size) for o in store.list("manifest/")] == [("manifest/m", 10)]
    assert list(store.list("nothing/here/")) == []


def test_list_on_a_store_never_written_is_empty(tmp_path: Path) -> None:
    assert list(LocalStore(tmp_path / "absent").list()) == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "../x", "a/", "./a",
                                 f"wal/{TMP_PREFIX}x", "a\\b"])
def test_keys_that_could_escape_or_alias_are_refused(store: LocalStore, key: str) -> None:
    with pytest.raises(ValueError, match="invalid object key"):
        store.put(key, b"x")


def test_url_names_the_file(store: LocalStore) -> None:
    assert store.url("wal/x") == (store.root / "wal" / "x").as_uri()
    assert store.url() == store.root.as_uri()


def test_failed_write_leaves_no_partial_object_and_no_temp_file(
        store: LocalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.put("wal/seg", b"old content")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StoreError, match=r"cannot write 'wal/new'.*No space left"):
        store.put("wal/new", b"x" * 100_000, if_absent=True)
    with pytest.raises(StoreError, match="No space left"):
        store.put("wal/seg", b"new content")
    monkeypatch.undo()
    assert store.head("wal/new") is None
    assert store.get("wal/seg") == b"old content"
    assert [o.key for o in store.list()] == ["wal/seg"]
    assert sorted(p.name for p in (store.root / "wal").iterdir()) == ["seg"]


def test_readers_never_see_a_partial_object(store: LocalStore) -> None:
    """A reader racing a writer of large objects sees an old or a new object, never a part."""
    a, b = b"A" * (4 << 20), b"B" * (4 << 20)
    store.put("big", a)
    stop = threading.Event()
    seen: set[bytes] = set()
    bad: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            data = store.get("big")
            if data not in (a, b):
                bad.append(len(data))
            seen.add(data[:1])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(30):
            store.put("big", b if i % 2 == 0 else a)
    finally:
        stop.set()
        t.join()
    assert bad == []
    assert seen <= {b"A", b"B"} and seen


def test_racing_if_absent_writers_exactly_one_wins(store: LocalStore) -> None:
    results: list[tuple[int, bool]] = []
    barrier = threading.Barrier(8)

    def writer(i: int) -> None:
        barrier.wait()
        results.append((i, store.put("wal/contended", f"writer {i}".encode() * 10_000,
                                     if_absent=True)))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, won in results if won]
    assert len(winners) == 1
    assert store.get("wal/contended") == f"writer {winners[0]}".encode() * 10_000


def test_key_colliding_with_a_directory_is_a_store_error(store: LocalStore) -> None:
    store.put("a/b", b"x")
    with pytest.raises(StoreError, match="is a directory"):
        store.put("a", b"y", if_absent=True)


def test_objects_and_the_directories_made_for_them_are_private(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.put("wal/000000010000000000000001", b"x")
    store.put("state/progress/0000000001.json", b"{}", if_absent=True)
    for key in ("wal/000000010000000000000001", "state/progress/0000000001.json"):
        assert (tmp_path / "store" / key).stat().st_mode & 0o777 == 0o600
    for d in ("store", "store/wal", "store/state", "store/state/progress"):
        assert (tmp_path / d).stat().st_mode & 0o777 == 0o700, d


def test_files_go_in_and_out_whole_and_private(store: LocalStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"x" * (3 << 20))
    store.put_file("spill/b/x.spill", src)
    assert store.get("spill/b/x.spill") == src.read_bytes()
    out = tmp_path / "out"
    store.get_file("spill/b/x.spill", out)
    assert out.read_bytes() == src.read_bytes() and out.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ObjectNotFound, match="'spill/b/none'"):
        store.get_file("spill/b/none", tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_a_new_directory_is_made_durable_in_its_parent(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each directory a put creates has its entry fsynced in its parent (as a renamed file's
    is in its directory): without that, a crash can forget the directory and every object in
    it, however well their bytes were synced. Observed: which directories fsync was called on
    (the calls go through)."""
    synced: list[Path] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = LocalStore(tmp_path / "store")
    store.put("state/progress/0000000001.json", b"{}", if_absent=True)
    made = [tmp_path / "store", tmp_path / "store/state", tmp_path / "store/state/progress"]
    for directory in made:
        assert directory.parent in synced, f"{directory}'s entry in its parent was not synced"
    assert tmp_path / "store/state/progress" in synced  # the object's own entry
    synced.clear()
    store.put("state/progress/0000000002.json", b"{}")  # no new directory: no extra sync
    assert synced.count(tmp_path / "store/state") == 0
