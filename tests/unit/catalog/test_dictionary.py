"""The data dictionary (catalog/dictionary.py) built from the committed decoding fixture's
``cdclake.ddl`` messages: every ALTER TABLE of a table's life is a version valid from its
message's LSN, found by oid and by relfilenode at any LSN, and the whole survives JSON."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from tests.unit.decoding.fixture import VERSIONS, DecodingFixture, load, relation_named


@pytest.fixture(params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def built(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[DecodingFixture, Dictionary]:
    fx = load(request.param, tmp_path / "wal")
    return fx, fx.decode(tmp_path / "spill")[2]


def live(v: object) -> list[str]:
    return [c.name for c in v.columns if not c.dropped]  # type: ignore[attr-defined]


def test_a_tables_life_is_a_list_of_versions(built: tuple[DecodingFixture, Dictionary]) -> None:
    _fx, d = built
    versions = relation_named(d, "other.alt_renamed")
    assert [v.valid_from for v in versions] == sorted(v.valid_from for v in versions)
    assert live(versions[0]) == ["id", "a", "b", "c"]
    assert live(versions[-1]) == ["id", "a_renamed", "b", "d", "e", "f", "g"]
    names = [f"{v.schema}.{v.name}" for v in versions]
    assert names[0] == "public.alt" and "public.alt_renamed" in names
    # the dropped column keeps its slot: attnums never move
    assert [c.attnum for c in versions[-1].columns] == list(range(1, 8 + 1))
    assert versions[-1].columns[3].dropped
    # ADD COLUMN ... DEFAULT 7: rows written before it read the missing value
    assert versions[-1].columns[6].name == "f"
    assert any(c.name == "f" and c.has_missing and c.missing_text == "7"
               for v in versions for c in v.columns)
    # ALTER COLUMN TYPE and ADD COLUMN ... DEFAULT random() rewrote the table
    assert len({v.relfilenode for v in versions}) >= 3


def test_lookups_at_an_lsn(built: tuple[DecodingFixture, Dictionary]) -> None:
    _fx, d = built
    versions = relation_named(d, "other.alt_renamed")
    for before, after in itertools.pairwise(versions):
        assert d.relation_for_oid(after.oid, after.valid_from - 1) == before
        assert d.relation_for_oid(after.oid, after.valid_from) == after
    first = versions[0]
    assert d.relation_for_locator(first.tablespace, first.relfilenode, first.valid_from) == first
    assert d.relation_for_oid(first.oid, first.valid_from - 1) is None  # not yet created
    last = versions[-1]
    assert d.relation_for_locator(last.tablespace, last.relfilenode, 2**63) == last


def test_json_round_trip(built: tuple[DecodingFixture, Dictionary]) -> None:
    _fx, d = built
    again = Dictionary.from_json(d.to_json())
    assert again.to_json() == d.to_json()
    assert again.versions() == d.versions()
    assert again.pg_class_loc == d.pg_class_loc
