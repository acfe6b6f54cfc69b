"""Layout: every key the stream uses, and the inverse parsing of listings."""

from __future__ import annotations

import pytest

from cdclake.archive.layout import Layout, WalFileKind, wal_file_kind
from cdclake.lsn import SegmentName

SEG = "000000010000000A000000FE"


@pytest.mark.parametrize(("name", "kind"), [
    (SEG, WalFileKind.SEGMENT),
    (SEG + ".partial", WalFileKind.PARTIAL),
    ("0000000A.history", WalFileKind.HISTORY),
    (SEG + ".00000028.backup", WalFileKind.BACKUP),
    (SEG.lower(), None),
    (SEG + ".zst", None),
    ("archive_status", None),
    ("0000000A.history.tmp", None),
])
def test_wal_file_kinds(name: str, kind: WalFileKind | None) -> None:
    assert wal_file_kind(name) is kind


def test_keys_follow_the_architecture_layout() -> None:
    lay = Layout()
    assert lay.wal_key(SEG) == f"wal/{SEG}"
    assert lay.wal_key(SEG, compressed=True) == f"wal/{SEG}.zst"
    # the name depends on the segment size: 4096 segments per 4 GiB at 1 MiB, 256 at 16 MiB
    assert lay.segment_key(SegmentName(1, 0xA * 4096 + 0xFE), 1 << 20) == f"wal/{SEG}"
    assert lay.segment_key(SegmentName(1, 0xA * 256 + 0xFE)) == f"wal/{SEG}"
    assert lay.history_key(10) == "wal/0000000A.history"
    assert lay.system_key() == "manifest/system.json"
    assert lay.manifest_key(SEG) == f"manifest/wal/{SEG}.json"
    assert lay.dictionary_key("b1", 42) == "dictionary/b1/g0000000042.json"
    assert lay.changes_key("b-0000000001500800", "public.t/v00/part-0.parquet") == \
        "changes/b-0000000001500800/public.t/v00/part-0.parquet"
    assert lay.changes_prefix("b1") == "changes/b1/"
    assert lay.changes_prefix("b1", 7) == "changes/b1/g0000000007/"
    assert lay.validated_key("b1") == "state/validated/b1.json"
    assert lay.progress_key() == "state/progress.json"
    assert lay.report_key("gx/index.html") == "reports/gx/index.html"


def test_spill_key_matches_postgresql_spill_file_names() -> None:
    # ReorderBufferSerializedPath: "xid-%u-lsn-%X-%X.spill" with the LSN's two halves
    assert Layout().spill_key("main", 1234, 0x1_0A000000, generation=3) == \
        "spill/main/g0000000003/xid-1234-lsn-1-A000000.spill"
    assert Layout().spill_key("p3", 4294967295, 0, generation=0) == \
        "spill/p3/g0000000000/xid-4294967295-lsn-0-0.spill"
    assert Layout().spill_prefix("p3") == "spill/p3/"
    assert Layout().spill_prefix("p3", 3) == "spill/p3/g0000000003/"


def test_prefix_nests_every_key() -> None:
    lay = Layout("streams/orders/")
    assert lay.wal_key(SEG) == f"streams/orders/wal/{SEG}"
    assert lay.wal_prefix() == "streams/orders/wal/"
    assert lay.manifest_prefix() == "streams/orders/manifest/wal/"
    assert lay.wal_file_of(f"streams/orders/wal/{SEG}.zst") == (SEG, True)
    assert lay.wal_file_of(f"wal/{SEG}") is None
    # keys built on a batch's directory are nested once, under the directory listed
    assert lay.spill_key("b1", 7, 0, generation=1) == \
        "streams/orders/spill/b1/g0000000001/xid-7-lsn-0-0.spill"
    assert lay.spill_key("b1", 7, 0, generation=1).startswith(lay.spill_root())
    assert lay.dictionary_key("b1", 1) == "streams/orders/dictionary/b1/g0000000001.json"
    assert lay.batch_manifest_key("b1") == "streams/orders/changes/b1/_manifest.json"


def test_inverse_parsing_of_listed_keys() -> None:
    lay = Layout()
    assert lay.wal_file_of(f"wal/{SEG}") == (SEG, False)
    assert lay.wal_file_of(f"wal/{SEG}.zst") == (SEG, True)
    assert lay.wal_file_of("wal/00000002.history") == ("00000002.history", False)
    assert lay.wal_file_of("wal/readme.txt") is None
    assert lay.wal_file_of(f"manifest/wal/{SEG}.json") is None
    assert lay.manifest_name_of(f"manifest/wal/{SEG}.json") == SEG
    assert lay.manifest_name_of("manifest/system.json") is None
    assert lay.manifest_name_of(f"manifest/wal/{SEG}.partial.json") is None


@pytest.mark.parametrize("call", [
    lambda lay: lay.wal_key("../../etc/passwd"),
    lambda lay: lay.wal_key("00000001000000000000001"),
    lambda lay: lay.manifest_key("00000002.history"),
    lambda lay: lay.spill_key("../x", 1, 0, generation=0),
    lambda lay: lay.spill_key("main", -1, 0, generation=0),
    lambda lay: lay.spill_key("main", 1, 0, generation=-1),
    lambda lay: lay.changes_key("b/../c", "x"),
    lambda lay: lay.changes_key("b", "../x"),
    lambda lay: lay.dictionary_key(".hidden", 0),
    lambda lay: lay.report_key("/abs"),
])
def test_bad_names_are_refused(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        call(Layout())
