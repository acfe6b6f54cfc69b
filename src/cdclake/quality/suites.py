"""Suite files in ``expectations/``: GX suite JSON with a few run-time parameters.

The checks are the same for every table, but the columns they name are not (a table's key
columns, its text columns), and GX's own ``$PARAMETER`` mechanism only covers values, never
the columns an expectation is about. So the suite files are GX suite JSON in which strings may
hold ``${name}`` placeholders, and each expectation may carry, under ``meta.cdclake``:

``check``
    a stable id for the check (kept in the concrete suite; reports and tests key on it);
``when``
    ``{param: [allowed values]}`` or ``{param: {"min_items": n, "max_items": m}}``: the
    expectation applies to a table only if every condition holds;
``for_each`` / ``as``
    a parameter name (or a literal list): the expectation is repeated once per item, with
    ``${<as>}`` (default ``${column}``) bound to the item.

A placeholder that is a whole string becomes the parameter's value (a list stays a list); one
inside a longer string is replaced by its text. This module does the expansion without
importing GX, so it is cheap to test; :func:`build_suite` turns the result into a GX suite.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdclake.errors import ConfigError
from cdclake.quality import deferred

if TYPE_CHECKING:
    from great_expectations.core.expectation_suite import ExpectationSuite

CHANGE_STREAM = "change_stream"
MIRROR_TABLE = "mirror_table"

#: The suite files, shipped inside the package through a symlink to the top-level directory.
SUITES_DIR = Path(__file__).resolve().parent / "expectations"

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TEMPLATE_KEYS = ("when", "for_each", "as")


def suite_file(name: str, directory: Path | None = None) -> Path:
    return (directory or SUITES_DIR) / f"{name}.json"


def load_template(name: str, directory: Path | None = None) -> dict[str, Any]:
    """Read a suite file; a missing or malformed one is a deployment error, said plainly.
    The package's own are read as its resources: a driver spark-submit started imports
    cdclake from a zip (``--py-files``), where they are no files."""
    path: Path | Traversable = (suite_file(name, directory) if directory is not None else
                                resources.files(__package__) / "expectations" / f"{name}.json")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read expectation suite {name!r} at {path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"expectation suite {path} is not valid JSON: {exc}") from exc
    if not isinstance(data.get("expectations"), list):
        raise ConfigError(f"expectation suite {path} has no 'expectations' list")
    return data


def expand(template: Mapping[str, Any], params: Mapping[str, Any], *,
           suite_name: str) -> dict[str, Any]:
    """The concrete GX suite dict for one table: conditions applied, loops and names filled."""
    source = str(template.get("name", "?"))
    expectations: list[dict[str, Any]] = []
    for position, raw in enumerate(template["expectations"]):
        spec = dict(raw.get("meta", {}).get("cdclake", {}))
        where = f"suite {source}, expectation #{position} ({raw.get('type')})"
        if not _applies(spec.get("when", {}), params, where):
            continue
        loop = spec.get("for_each")
        if loop is None:
            bindings: list[Mapping[str, Any]] = [{}]
        else:
            items = loop if isinstance(loop, list) else _lookup(params, loop, where)
            if not isinstance(items, list):
                raise ConfigError(f"{where}: for_each {loop!r} is not a list")
            name = spec.get("as", "column")
            bindings = [{name: item} for item in items]
        for bound in bindings:
            scope = {**params, **bound}
            expectation = _substitute(copy.deepcopy(raw), scope, where)
            meta = expectation.setdefault("meta", {})
            meta["cdclake"] = {
                k: v for k, v in meta.get("cdclake", {}).items() if k not in _TEMPLATE_KEYS
            }
            expectations.append(expectation)
    meta = copy.deepcopy(dict(template.get("meta", {})))
    meta.setdefault("cdclake", {})["template"] = source
    return {
        "name": suite_name,
        "id": None,
        "expectations": expectations,
        "meta": meta,
        "notes": _substitute(copy.deepcopy(template.get("notes")), params, f"suite {source}"),
    }


def _applies(conditions: Mapping[str, Any], params: Mapping[str, Any], where: str) -> bool:
    for name, rule in conditions.items():
        value = _lookup(params, name, where)
        if isinstance(rule, list):
            if value not in rule:
                return False
        elif isinstance(rule, dict):
            size = len(value)
            if size < rule.get("min_items", 0) or size > rule.get("max_items", size):
                return False
        else:
            raise ConfigError(f"{where}: 'when' rule for {name!r} must be a list or an object")
    return True


def _lookup(params: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in params:
        known = ", ".join(sorted(params))
        raise ConfigError(f"{where}: unknown parameter ${{{name}}} (known: {known})")
    return params[name]


def _substitute(value: Any, params: Mapping[str, Any], where: str) -> Any:
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole:
            return copy.deepcopy(_lookup(params, whole.group(1), where))
        return _PLACEHOLDER.sub(lambda m: _as_text(_lookup(params, m.group(1), where)), value)
    if isinstance(value, list):
        return [_substitute(v, params, where) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, params, where) for k, v in value.items()}
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ", ".join(str(v) for v in value) if value else "(none)"
    return str(value)


def build_suite(suite: Mapping[str, Any]) -> ExpectationSuite:
    """A GX suite from an expanded dict; an invalid expectation raises instead of vanishing.

    ``ExpectationSuite(expectations=[...dicts])`` only logs an expectation it cannot build and
    carries on without it, which would silently drop a check; building each one first makes
    that an error.
    """
    gx = deferred.great_expectations()
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    from cdclake.quality import gx_expectations  # noqa: F401  (registers the custom types)

    built = []
    for item in suite["expectations"]:
        try:
            config = ExpectationConfiguration(
                type=item["type"],
                kwargs=item.get("kwargs", {}),
                meta=item.get("meta"),
                notes=item.get("notes"),
                description=item.get("description"),
                severity=item.get("severity", "critical"),
            )
            built.append(config.to_domain_obj())
        except Exception as exc:  # GX raises several unrelated types for a bad config
            raise ConfigError(
                f"suite {suite['name']}: expectation {item.get('type')!r} with "
                f"{item.get('kwargs')} is not valid: {exc}"
            ) from exc
    return gx.ExpectationSuite(
        name=suite["name"], expectations=built, meta=dict(suite.get("meta") or {}),
        notes=suite.get("notes"),
    )
