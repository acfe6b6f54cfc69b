"""The dictionary follows type-level DDL: ALTER TYPE/DOMAIN change no relation, yet the tables
whose columns decode through the type get a version at the DDL's LSN, built from the types
valid there, so rows before it decode as they were and rows after it as they are."""

from __future__ import annotations

import struct

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RelationVersion
from cdclake.decoding.rows import LayoutCache
from cdclake.errors import DecodingError, TupleDecodeError
from tests.unit.catalog.messages import (
    COLOR,
    COMPOSITE,
    INT4,
    INT8,
    MOOD_ARRAY,
    MOOD_DOMAIN,
    MOOD_OID,
    TEXT,
    array_of,
    column,
    composite,
    domain,
    enum,
    message,
    relation,
)

SAD, HAPPY, ECSTATIC = 80001, 80002, 80003
MOODS, PLAIN, PAIRS = 16400, 16401, 16402
MOOD_TYPES = [INT4, TEXT, enum({SAD: "sad", HAPPY: "happy"}),
              array_of(MOOD_OID, "mood[]", MOOD_ARRAY), domain(MOOD_OID, "mood_dom")]


def _moods_table(columns: list[dict] | None = None) -> dict:
    return relation(MOODS, "moods", columns or [
        column(1, "id", 23), column(2, "m", MOOD_OID), column(3, "ma", MOOD_ARRAY, -1),
        column(4, "md", MOOD_DOMAIN)])


def _installed() -> Dictionary:
    d = Dictionary()
    d.apply_message(100, message("dictionary", [
        _moods_table(), relation(PLAIN, "plain", [column(1, "id", 23), column(2, "v", 25, -1)]),
    ], MOOD_TYPES))
    return d


def _label(d: Dictionary, lsn: int, enum_oid: int, attnum: int = 2) -> str:
    """How the moods column ``attnum`` prints the enum value ``enum_oid`` at ``lsn``."""
    rel = d.relation_for_locator(1663, MOODS, lsn)
    assert rel is not None
    layout = LayoutCache(d.types).get(rel)
    codec = next(lc.codec for lc in layout.live if lc.column.attnum == attnum)
    return codec.text(struct.pack("<I", enum_oid))


def _versions(d: Dictionary, oid: int) -> list[int]:
    return [v.valid_from for v in d.versions() if v.oid == oid]


def test_a_new_label_gives_the_tables_using_the_type_a_version() -> None:
    d = _installed()
    added = d.apply_message(200, message(types=[
        enum({SAD: "sad", HAPPY: "happy", ECSTATIC: "ecstatic"}),
        array_of(MOOD_OID, "mood[]", MOOD_ARRAY)], changed=[MOOD_OID, MOOD_ARRAY]))
    assert [(v.oid, v.valid_from) for v in added] == [(MOODS, 200)]
    assert _versions(d, PLAIN) == [100], "a table not using the type keeps its version"
    assert _label(d, 250, ECSTATIC) == "ecstatic"
    assert _label(d, 250, ECSTATIC, attnum=4) == "ecstatic", "through the domain"
    with pytest.raises(TupleDecodeError, match="no label in the dictionary"):
        _label(d, 150, ECSTATIC)  # the version before the DDL decodes with the old labels
    assert _label(d, 150, HAPPY) == "happy"


def test_codecs_cached_for_the_old_version_are_not_reused() -> None:
    d = _installed()
    cache = LayoutCache(d.types)
    before = d.relation_for_locator(1663, MOODS, 150)
    assert before is not None
    old_layout = cache.get(before)
    d.apply_message(200, message(types=[enum({SAD: "blue", HAPPY: "happy"})],
                                 changed=[MOOD_OID]))
    after = d.relation_for_locator(1663, MOODS, 250)
    assert after is not None and after is not before
    new_layout = cache.get(after)
    assert new_layout is not old_layout
    assert cache.get(before) is old_layout, "the old version keeps its codecs"
    sad = struct.pack("<I", SAD)
    assert old_layout.live[1].codec.text(sad) == "sad"
    assert new_layout.live[1].codec.text(sad) == "blue"
    # arrays of the enum decode through the same labels
    assert new_layout.live[2].codec.type_name == "mood[]"


def test_a_renamed_type_is_printed_by_its_name_at_each_lsn() -> None:
    d = _installed()
    d.apply_message(200, message(types=[
        enum({SAD: "sad", HAPPY: "happy"}, name="other.feeling", namespace="other"),
        array_of(MOOD_OID, "other.feeling[]", MOOD_ARRAY)], changed=[MOOD_OID, MOOD_ARRAY]))
    assert d.types[MOOD_OID].name == "other.feeling"
    assert d.types.at(150)[MOOD_OID].name == "mood"
    assert d.types.at(200)[MOOD_ARRAY].name == "other.feeling[]"
    for lsn, names in ((150, ["integer", "mood", "mood[]", "mood_dom"]),
                       (250, ["integer", "other.feeling", "other.feeling[]", "mood_dom"])):
        rel = d.relation_for_locator(1663, MOODS, lsn)
        assert rel is not None
        assert [lc.codec.type_name for lc in LayoutCache(d.types).get(rel).live] == names


def test_type_ddl_that_changes_nothing_printed_adds_no_version() -> None:
    d = _installed()
    # ALTER DOMAIN ... SET DEFAULT / ADD CONSTRAINT: the same pg_type facts again
    assert d.apply_message(200, message(types=[domain(MOOD_OID, "mood_dom"), MOOD_TYPES[2]],
                                        changed=[MOOD_DOMAIN])) == []
    assert _versions(d, MOODS) == [100]


def test_types_that_only_come_with_a_relation_never_undo_a_type_change() -> None:
    d = _installed()
    d.apply_message(200, message(types=[enum({SAD: "sad", HAPPY: "happy", ECSTATIC: "ecs"})],
                                 changed=[MOOD_OID]))
    # ALTER TABLE on a table with a mood column, written before the label was committed
    stale = enum({SAD: "sad", HAPPY: "happy"})
    d.apply_message(300, message(relations=[_moods_table()], types=[INT4, stale], changed=[]))
    assert d.types[MOOD_OID].enum_labels[ECSTATIC] == "ecs"
    assert _label(d, 350, ECSTATIC) == "ecs"
    # ... but a type not known yet is learnt from them
    d.apply_message(400, message(relations=[_moods_table([
        column(1, "id", 23), column(2, "c", COLOR)])], types=[enum({1: "red"}, "color",
                                                                   oid=COLOR)], changed=[]))
    assert d.types[COLOR].enum_labels == {1: "red"}


def test_messages_of_an_older_install_take_all_their_types_as_news() -> None:
    d = _installed()
    d.apply_message(200, message(types=[enum({SAD: "blue", HAPPY: "happy"})]))
    assert d.types[MOOD_OID].enum_labels[SAD] == "blue"
    assert _versions(d, MOODS) == [100, 200]


def test_a_change_committed_out_of_lsn_order_rebuilds_the_later_version() -> None:
    """Transaction A adds a label (message at 200, commit at 500); B alters the table (message
    at 300, commit at 400) and is applied first: B's version may already have codecs without
    the label, so the table gets one more version at A's commit."""
    d = _installed()
    d.apply_message(300, message(relations=[_moods_table()], types=MOOD_TYPES, changed=[]),
                    commit_lsn=400)
    b_version = d.relation_for_locator(1663, MOODS, 350)
    assert b_version is not None and b_version.valid_from == 300
    d.apply_message(200, message(types=[enum({SAD: "sad", HAPPY: "happy", ECSTATIC: "e"})],
                                 changed=[MOOD_OID]), commit_lsn=500)
    assert _versions(d, MOODS) == [100, 200, 300, 500]
    assert _label(d, 250, ECSTATIC) == "e"
    assert _label(d, 600, ECSTATIC) == "e"


def test_composite_attributes_are_followed() -> None:
    d = Dictionary()
    pair = composite([("a", 23), ("b", 25)])
    d.apply_message(100, message("dictionary", [
        relation(PAIRS, "holds_pair", [column(1, "id", 23), column(2, "p", COMPOSITE, -1)]),
        relation(PLAIN, "plain", [column(1, "id", 23)])], [INT4, TEXT, pair]))
    assert [a.name for a in d.types[COMPOSITE].attributes] == ["a", "b"]
    # ALTER TYPE pair ADD ATTRIBUTE c bigint: the composite's pg_class row is what changed
    added = d.apply_message(200, message(types=[INT8, composite([("a", 23), ("b", 25),
                                                                 ("c", 20)])],
                                         changed=[COMPOSITE]))
    assert [(v.oid, v.valid_from) for v in added] == [(PAIRS, 200)]
    assert [a.type_oid for a in d.types[COMPOSITE].attributes] == [23, 25, 20]
    assert [a.type_oid for a in d.types.at(150)[COMPOSITE].attributes] == [23, 25]
    assert d.types[20].name == "bigint", "the attribute's type is learnt with it"


def test_a_type_used_only_through_a_composite_attribute_reaches_the_table() -> None:
    d = Dictionary()
    d.apply_message(100, message("dictionary", [
        relation(PAIRS, "holds_pair", [column(1, "id", 23), column(2, "p", COMPOSITE, -1)])],
        [INT4, composite([("a", 23), ("m", MOOD_OID)]), enum({SAD: "sad"})]))
    d.apply_message(200, message(types=[enum({SAD: "blue"})], changed=[MOOD_OID]))
    assert _versions(d, PAIRS) == [100, 200]


def test_a_dropped_relation_gets_no_version() -> None:
    d = _installed()
    d.apply_message(150, message("drop", [{"oid": MOODS}]))
    assert d.apply_message(200, message(types=[enum({SAD: "blue", HAPPY: "happy"})],
                                        changed=[MOOD_OID])) == []
    assert d.relation_for_oid(MOODS, 250) is None


def test_type_history_survives_persistence() -> None:
    d = _installed()
    d.apply_message(200, message(types=[enum({SAD: "blue", HAPPY: "happy"})],
                                 changed=[MOOD_OID]))
    again = Dictionary.from_json(d.to_json())
    assert again.to_json() == d.to_json()
    assert _label(again, 150, SAD) == "sad"
    assert _label(again, 250, SAD) == "blue"


def test_a_dictionary_saved_before_type_history_loads() -> None:
    d = _installed().to_json()
    for t in d["types"]:
        del t["valid_from"]
        del t["attributes"]
    again = Dictionary.from_json(d)
    assert again.types[MOOD_OID].enum_labels[SAD] == "sad"
    assert again.types.at(0)[MOOD_OID] == again.types[MOOD_OID]


@pytest.mark.parametrize("bad", [b'{"kind": "relations", "changed_types": 7}',
                                 b'{"kind": "relations", "types": [{"oid": 1}]}',
                                 b'{"kind": "relations", "types": 3}'])
def test_a_malformed_type_message_is_one_clear_error(bad: bytes) -> None:
    with pytest.raises(DecodingError, match=r"cdclake.ddl message at 0/C8 is not valid"):
        _installed().apply_message(200, bad)


def test_relation_versions_are_shared_not_copied_per_lookup() -> None:
    d = _installed()
    d.apply_message(200, message(types=[enum({SAD: "blue", HAPPY: "happy"})],
                                 changed=[MOOD_OID]))
    a = d.relation_for_locator(1663, MOODS, 300)
    b = d.relation_for_oid(MOODS, 300)
    assert isinstance(a, RelationVersion) and a is b


def test_a_type_first_seen_with_a_relation_then_changed_earlier_in_the_wal() -> None:
    """B adds the first mood column (message at 300, commit at 400) and so brings the mood
    facts it could see; A added a label before (message at 200) but commits after (500)."""
    d = Dictionary()
    d.apply_message(100, message("dictionary", [relation(PLAIN, "plain", [column(1, "id", 23)])],
                                 [INT4]))
    d.apply_message(300, message(relations=[relation(PLAIN, "plain", [
        column(1, "id", 23), column(2, "m", MOOD_OID)])], types=[INT4, enum({SAD: "sad"})],
        changed=[]), commit_lsn=400)
    d.apply_message(200, message(types=[enum({SAD: "sad", HAPPY: "happy"})],
                                 changed=[MOOD_OID]), commit_lsn=500)
    assert d.types.at(350)[MOOD_OID].enum_labels == {SAD: "sad", HAPPY: "happy"}
    assert _versions(d, PLAIN) == [100, 300, 500], "B's version may have stale codecs cached"


def test_facts_learnt_before_a_type_change_stay_the_version_before_it() -> None:
    d = Dictionary()
    d.apply_message(100, message("dictionary", [relation(PLAIN, "plain", [column(1, "id", 23)])],
                                 [INT4]))
    d.apply_message(200, message(relations=[_moods_table()], types=MOOD_TYPES, changed=[]))
    d.apply_message(300, message(types=[enum({SAD: "blue", HAPPY: "happy"})],
                                 changed=[MOOD_OID]))
    assert _label(d, 250, SAD) == "sad" and _label(d, 350, SAD) == "blue"
    again = Dictionary.from_json(d.to_json())
    assert again.to_json() == d.to_json()
    assert _label(again, 250, SAD) == "sad"
