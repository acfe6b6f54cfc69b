"""Committed WAL fixtures (written by tests/oracle/wal/regenerate_fixtures.py): decompressed
segments + expectations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from tests.support import VERSIONS
from tests.support.pgwaldump import Row, row_from_json
from tests.support.twins import both_implementations  # noqa: F401 - autouse: both implementations

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class WalFixture:
    """A fixture's segments, decompressed into a private directory, and pg_waldump's rows."""

    version: int
    dir: Path
    segments: list[Path]
    compressed: list[Path]
    segment_size: int
    rows: list[Row]

    def segment_start(self, path: Path) -> int:
        """LSN of the first byte of a segment file of this fixture."""
        segno = int(path.name[8:16], 16) * (0x100000000 // self.segment_size) + int(
            path.name[16:24], 16)
        return segno * self.segment_size


def unzstd(data: bytes) -> bytes:
    """The bytes of a committed, zstd-compressed fixture file."""
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30)


def load_fixture(version: int, dest: Path) -> WalFixture:
    src = FIXTURES / f"pg{version}"
    doc = json.loads(unzstd((src / "expected.json.zst").read_bytes()))
    dest.mkdir(parents=True, exist_ok=True)
    compressed = sorted(src.glob("0*.zst"))
    segments = []
    for f in compressed:
        out = dest / f.name[:-4]
        out.write_bytes(unzstd(f.read_bytes()))
        segments.append(out)
    assert [p.name for p in segments] == doc["segments"]
    return WalFixture(version, dest, segments, compressed, doc["segment_size"],
                      [row_from_json(r) for r in doc["records"]])


@pytest.fixture(params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def walfix(request: pytest.FixtureRequest, tmp_path: Path) -> WalFixture:
    """Each version's fixture in its own tmp directory (tests may damage the copy)."""
    return load_fixture(request.param, tmp_path / f"pg{request.param}")


@pytest.fixture
def wal15(tmp_path: Path) -> WalFixture:
    """The PostgreSQL 15 fixture: four consecutive segments (bad-input tests need several)."""
    return load_fixture(15, tmp_path / "pg15")
