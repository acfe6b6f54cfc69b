"""The committed decoding fixtures (written by tests/oracle/decoding/regenerate_fixtures.py):
archived WAL of a workload with cdclake installed, and what a test_decoding slot printed for
it. Decoder-stage tests read them without a server."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion
from cdclake.decoding.context import DecodeOptions
from cdclake.decoding.decode import CatalogTracker
from cdclake.decoding.plugins.test_decoding import TestDecoding
from cdclake.decoding.session import DecodeResult, decode
from cdclake.decoding.walclass import PgClassTracker
from cdclake.lsn import parse_lsn
from cdclake.wal.source import DirectorySource
from tests.unit.wal.conftest import unzstd

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VERSIONS = (15, 18)


@dataclass
class DecodingFixture:
    version: int
    dir: Path  #: the decompressed segments
    db_oid: int
    read_from: int  #: taken before `cdclake source install`
    start_lsn: int  #: the slot's creation LSN
    end_lsn: int
    lines: list[str]  #: the slot's output
    ddl_key: bytes  #: signed the cdclake.ddl messages

    def options(self, spill_dir: Path, **kw: object) -> DecodeOptions:
        return DecodeOptions(db_oid=self.db_oid, start_lsn=self.start_lsn,
                             read_from=self.read_from, spill_dir=spill_dir,
                             ddl_key=self.ddl_key, **kw)  # type: ignore[arg-type]

    def decode(self, spill_dir: Path, *, dictionary: Dictionary | None = None,
               tracker: Callable[[Dictionary], CatalogTracker] | None = PgClassTracker,
               **kw: object) -> tuple[list[str], DecodeResult, Dictionary]:
        """``cdclake decode`` over the fixture, as the CLI wires it without a DSN."""
        lines: list[str] = []
        d = dictionary if dictionary is not None else Dictionary()
        result = decode(DirectorySource([self.dir]), d, self.options(spill_dir, **kw),
                        lambda dd, v: TestDecoding(lines.append, dd.types, version=v),
                        tracker=tracker)
        return lines, result, d


def load(version: int, dest: Path) -> DecodingFixture:
    src = FIXTURES / f"pg{version}"
    doc = json.loads(unzstd((src / "expected.json.zst").read_bytes()))
    dest.mkdir(parents=True, exist_ok=True)
    for name in doc["segments"]:
        (dest / name).write_bytes(unzstd((src / f"{name}.zst").read_bytes()))
    return DecodingFixture(version, dest, int(doc["db_oid"]), parse_lsn(doc["read_from"]),
                           parse_lsn(doc["start_lsn"]), parse_lsn(doc["end_lsn"]),
                           list(doc["lines"]), bytes.fromhex(doc["ddl_key"]))


def relation_named(d: Dictionary, qualified: str) -> list[RelationVersion]:
    """Every version of the relation named ``schema.table`` at some point, oldest first."""
    oids = {v.oid for v in d.versions() if f"{v.schema}.{v.name}" == qualified}
    return [v for v in d.versions() if v.oid in oids]
