"""TypeCatalog: pg_type facts by oid, newest as a mapping, every version by LSN."""

from __future__ import annotations

import dataclasses

from cdclake.catalog.model import Column, TypeInfo
from cdclake.catalog.types import TypeCatalog

MOOD = TypeInfo(oid=700001, name="mood", output="enum_out", typlen=4, typbyval=True,
                typalign="i", typtype="e", typcategory="E", enum_labels={1: "sad"})
MOOD_ARRAY = TypeInfo(oid=700000, name="mood[]", output="array_out", typlen=-1,
                      typbyval=False, typalign="i", typtype="b", typcategory="A",
                      element=MOOD.oid)
MOOD_RANGE = TypeInfo(oid=700002, name="moodrange", output="range_out", typlen=-1,
                      typbyval=False, typalign="i", typtype="r", typcategory="R",
                      range_subtype=MOOD.oid)
PAIR = TypeInfo(oid=700003, name="pair", output="record_out", typlen=-1, typbyval=False,
                typalign="d", typtype="c", typcategory="C", attributes=(
                    Column(1, "a", "a", 23, -1, 4, "i", True),
                    Column(2, "gone", "gone", MOOD.oid, -1, 4, "i", True, dropped=True)))


def test_the_newest_facts_are_the_mapping_and_older_ones_stay_reachable() -> None:
    c = TypeCatalog()
    assert c.put(MOOD, 100) is False, "a type first seen changes nothing decoded before"
    renamed = dataclasses.replace(MOOD, name="feeling", enum_labels={1: "blue"})
    assert c.put(renamed, 200) is True
    assert c[MOOD.oid] is renamed and c.get(MOOD.oid) is renamed and len(c) == 1
    assert c.at(150)[MOOD.oid] is MOOD and c.at(200)[MOOD.oid] is renamed
    assert c.at(50)[MOOD.oid] is MOOD, "learnt later: the earliest facts are the best known"
    assert c.at(150).get(12345) is None and 12345 not in c


def test_the_same_facts_again_are_no_change() -> None:
    c = TypeCatalog()
    c.put(MOOD, 100)
    assert c.put(dataclasses.replace(MOOD), 200) is False
    assert c.to_json() == [{**c.to_json()[0], "valid_from": 100}]


def test_learning_never_replaces_known_facts() -> None:
    c = TypeCatalog()
    c.put(MOOD, 100)
    c.learn(dataclasses.replace(MOOD, enum_labels={}), 200)
    assert c[MOOD.oid] is MOOD
    c.learn(MOOD_ARRAY, 200)
    assert c[MOOD_ARRAY.oid] is MOOD_ARRAY


def test_a_change_applied_out_of_lsn_order_lands_in_its_place() -> None:
    c = TypeCatalog()
    c.put(MOOD, 100)
    late = dataclasses.replace(MOOD, enum_labels={1: "sad", 2: "ok"})
    c.put(late, 300)
    early = dataclasses.replace(MOOD, enum_labels={1: "blue"})
    assert c.put(early, 200) is True
    assert [c.at(x)[MOOD.oid] for x in (150, 250, 350)] == [MOOD, early, late]
    assert c[MOOD.oid] is late


def test_dependencies_reach_through_arrays_ranges_domains_and_live_attributes() -> None:
    c = TypeCatalog()
    domain = TypeInfo(oid=700004, name="d", output="enum_out", typlen=4, typbyval=True,
                      typalign="i", typtype="d", typcategory="E", base=MOOD_ARRAY.oid)
    for t in (MOOD, MOOD_ARRAY, MOOD_RANGE, PAIR, domain):
        c.put(t, 100)
    changed = {MOOD.oid}
    for oid in (MOOD.oid, MOOD_ARRAY.oid, MOOD_RANGE.oid, domain.oid):
        assert c.depends_on(oid, changed, 100, {}), oid
    assert not c.depends_on(PAIR.oid, changed, 100, {}), "a dropped attribute reads nothing"
    assert not c.depends_on(23, changed, 100, {})


def test_persistence_keeps_every_version_in_a_stable_order() -> None:
    c = TypeCatalog()
    c.put(PAIR, 100)
    c.put(MOOD, 100)
    c.put(dataclasses.replace(MOOD, name="feeling"), 200)
    rows = c.to_json()
    assert [(r["oid"], r["valid_from"]) for r in rows] == [
        (MOOD.oid, 100), (MOOD.oid, 200), (PAIR.oid, 100)]
    again = TypeCatalog()
    again.load(rows)
    assert again.to_json() == rows
    assert again[PAIR.oid].attributes == PAIR.attributes
    assert again.at(150)[MOOD.oid].name == "mood"


def test_learnt_facts_older_than_a_change_that_committed_later_give_way_to_it() -> None:
    c = TypeCatalog()
    c.learn(MOOD, 300)
    changed = dataclasses.replace(MOOD, enum_labels={1: "sad", 2: "ok"})
    assert c.put(changed, 200) is True
    assert c.at(350)[MOOD.oid] is changed and c.at(250)[MOOD.oid] is changed
    assert [r["valid_from"] for r in c.to_json()] == [200]


def test_the_learnt_mark_survives_persistence() -> None:
    c = TypeCatalog()
    c.learn(MOOD, 300)
    again = TypeCatalog()
    again.load(c.to_json())
    changed = dataclasses.replace(MOOD, enum_labels={1: "blue"})
    assert again.put(changed, 200) is True
    assert again.at(400)[MOOD.oid] is changed
