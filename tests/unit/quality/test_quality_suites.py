"""Suite files: template expansion (no GX needed) and the shipped suites per table shape."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cdclake.errors import ConfigError
from cdclake.quality import inputs
from cdclake.quality.suites import (
    CHANGE_STREAM,
    MIRROR_TABLE,
    SUITES_DIR,
    build_suite,
    expand,
    load_template,
    suite_file,
)
from tests.support import quality_builders as builders

REPO_EXPECTATIONS = Path(__file__).resolve().parents[3] / "expectations"


def _template(*expectations: dict) -> dict:
    return {"name": "t", "expectations": list(expectations), "meta": {}}


def _checks(suite: dict) -> list[str]:
    return [e["meta"]["cdclake"]["check"] for e in suite["expectations"]]


def test_packaged_directory_is_the_top_level_expectations() -> None:
    assert SUITES_DIR.resolve() == REPO_EXPECTATIONS.resolve()
    for name in (CHANGE_STREAM, MIRROR_TABLE):
        data = json.loads(suite_file(name).read_text())
        assert data["name"] == name
        assert data["expectations"], name


def test_whole_placeholder_keeps_lists_and_inline_placeholder_becomes_text() -> None:
    suite = expand(_template({
        "type": "x", "kwargs": {"column_list": "${cols}", "note": "on ${cols} of ${table}"},
        "meta": {"cdclake": {"check": "c"}},
    }), {"cols": ["a", "b"], "table": "s.t"}, suite_name="n")
    (exp,) = suite["expectations"]
    assert exp["kwargs"] == {"column_list": ["a", "b"], "note": "on a, b of s.t"}
    assert suite["name"] == "n"


def test_when_filters_and_for_each_repeats() -> None:
    template = _template(
        {"type": "x", "kwargs": {"column": "${column}"},
         "meta": {"cdclake": {"check": "each", "for_each": "keys"}}},
        {"type": "y", "kwargs": {}, "meta": {"cdclake": {"check": "only_d",
                                                         "when": {"ident": ["d"]}}}},
        {"type": "z", "kwargs": {"c": "${k}"},
         "meta": {"cdclake": {"check": "lit", "for_each": ["p", "q"], "as": "k"}}},
        {"type": "w", "kwargs": {}, "meta": {"cdclake": {"check": "two_plus",
                                                         "when": {"keys": {"min_items": 2}}}}},
    )
    suite = expand(template, {"keys": ["a", "b"], "ident": "n"}, suite_name="n")
    assert [(e["type"], e["kwargs"]) for e in suite["expectations"]] == [
        ("x", {"column": "a"}), ("x", {"column": "b"}), ("z", {"c": "p"}), ("z", {"c": "q"}),
        ("w", {}),
    ]
    # template-only keys are gone, the check id stays
    assert all(set(e["meta"]["cdclake"]) == {"check"} for e in suite["expectations"])
    one_key = expand(template, {"keys": ["a"], "ident": "d"}, suite_name="n")
    assert _checks(one_key) == ["each", "only_d", "lit", "lit"]


def test_unknown_placeholder_is_an_error_naming_it() -> None:
    template = _template({"type": "x", "kwargs": {"column": "${nope}"}, "meta": {}})
    with pytest.raises(ConfigError, match=r"unknown parameter \$\{nope\}"):
        expand(template, {"table": "s.t"}, suite_name="n")


def test_missing_and_malformed_suite_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read expectation suite 'absent'"):
        load_template("absent", tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_template("bad", tmp_path)
    (tmp_path / "empty.json").write_text('{"name": "empty"}')
    with pytest.raises(ConfigError, match="no 'expectations' list"):
        load_template("empty", tmp_path)


@pytest.mark.parametrize(("replident", "keys", "present", "absent"), [
    ("d", ("id",), {"identity"}, {"unkeyed_updates", "unkeyed_deletes"}),
    ("i", ("id",), {"identity"}, {"unkeyed_updates", "unkeyed_deletes"}),
    ("f", (), {"identity"}, {"unkeyed_updates", "unkeyed_deletes"}),
    ("n", (), {"unkeyed_updates", "unkeyed_deletes"}, {"identity"}),
    ("d", (), {"unkeyed_updates", "unkeyed_deletes"}, {"identity"}),  # no primary key
])
def test_change_stream_suite_per_replica_identity(replident: str, keys: tuple[str, ...],
                                                  present: set[str], absent: set[str]) -> None:
    rel = builders.relation(replident=replident, key=keys)
    params = inputs.stream_parameters("public.orders", inputs.identity_of(rel))
    suite = expand(load_template(CHANGE_STREAM), params, suite_name="s")
    checks = set(_checks(suite))
    assert present <= checks
    assert not (absent & checks)
    assert {"commit_lsn_order", "lsn_order_in_transaction", "change_unique"} <= checks
    for exp in suite["expectations"]:
        if exp["meta"]["cdclake"]["check"] == "identity":
            assert exp["severity"] == "critical"
            assert exp["kwargs"]["key_columns"] == list(keys)
            assert exp["kwargs"]["column_list"] == ["_op", "_old_key", *keys]
        if exp["meta"]["cdclake"]["check"].startswith("unkeyed_"):
            assert exp["severity"] == "warning"


@pytest.mark.parametrize(("keys", "unique_type"), [
    (("id",), "expect_column_values_to_be_unique"),
    (("id", "note"), "expect_compound_columns_to_be_unique"),
])
def test_mirror_suite_picks_the_uniqueness_expectation_by_key_width(
        keys: tuple[str, ...], unique_type: str) -> None:
    rel = builders.relation(key=keys)
    table = builders.mirror(rel, [{"id": 1, "note": "a"}])
    params = inputs.mirror_parameters("public.orders", inputs.identity_of(rel), table.schema)
    suite = expand(load_template(MIRROR_TABLE), params, suite_name="m")
    unique = [e for e in suite["expectations"] if e["meta"]["cdclake"]["check"] == "key_unique"]
    assert [e["type"] for e in unique] == [unique_type]
    not_null = [e["kwargs"]["column"] for e in suite["expectations"]
                if e["meta"]["cdclake"]["check"] == "key_not_null"]
    assert not_null == list(keys)
    placeholders = [e["kwargs"]["column"] for e in suite["expectations"]
                    if e["meta"]["cdclake"]["check"] == "no_toast_placeholder"]
    assert placeholders == ["note"]


def test_mirror_suite_has_no_key_checks_without_a_merge_key() -> None:
    rel = builders.relation(replident="f", key=())
    table = builders.mirror(rel, [{"id": 1, "note": "a"}], text_type=pa.large_string())
    params = inputs.mirror_parameters("public.orders", inputs.identity_of(rel), table.schema)
    checks = _checks(expand(load_template(MIRROR_TABLE), params, suite_name="m"))
    assert "key_unique" not in checks and "key_not_null" not in checks
    assert checks.count("no_toast_placeholder") == 1


def test_build_suite_refuses_an_invalid_expectation_instead_of_dropping_it() -> None:
    suite = {"name": "broken", "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"}},
        {"type": "expect_compound_columns_to_be_unique", "kwargs": {"column_list": ["a"]}},
    ]}
    with pytest.raises(ConfigError, match="expect_compound_columns_to_be_unique"):
        build_suite(suite)


def test_build_suite_keeps_every_expectation_of_the_shipped_suites() -> None:
    rel = builders.relation(replident="n", key=())
    params = inputs.stream_parameters("public.orders", inputs.identity_of(rel))
    expanded = expand(load_template(CHANGE_STREAM), params, suite_name="s")
    built = build_suite(expanded)
    assert len(built.expectations) == len(expanded["expectations"])
    assert {e.severity.value for e in built.expectations} == {"critical", "warning"}
