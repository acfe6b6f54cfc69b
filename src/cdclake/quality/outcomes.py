"""GX validation results -> :class:`~cdclake.quality.report.TableResult`.

Works on the JSON form of GX's results (``to_json_dict``), so every value that reaches a
report is already JSON-safe (numpy ints, timestamps, decimals converted by GX itself).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time
from typing import Any

from cdclake.quality.report import (
    SEVERITY_CRITICAL,
    ExpectationOutcome,
    IdentityNothingTable,
    TableResult,
)

#: Check ids (``meta.cdclake.check``) whose unexpected counts the report lifts out.
UNKEYED_UPDATES = "unkeyed_updates"
UNKEYED_DELETES = "unkeyed_deletes"


def table_result(*, suite: str, table: str, gx_suite: str, replica_identity: str,
                 key_columns: Sequence[str], rows: int, validation: Mapping[str, Any],
                 data_docs_page: str | None, check_order: Sequence[str] = ()) -> TableResult:
    """Sort a suite's failed expectations into failures (critical) and warnings.

    GX returns results in its own order; ``check_order`` (the suite file's order of check
    ids) puts them back, so a summary reads like the suite: columns first, then order.
    """
    rank = {check: i for i, check in reversed(list(enumerate(check_order)))}
    outcomes = sorted(
        ((_outcome(item), bool(item["success"])) for item in validation["results"]),
        key=lambda pair: rank.get(pair[0].check, len(rank)),
    )
    failures = [o for o, ok in outcomes if not ok and o.severity == SEVERITY_CRITICAL]
    warnings = [o for o, ok in outcomes if not ok and o.severity != SEVERITY_CRITICAL]
    return TableResult(
        suite=suite,
        table=table,
        gx_suite=gx_suite,
        success=not failures,
        rows=rows,
        evaluated=len(outcomes),
        replica_identity=replica_identity,
        key_columns=list(key_columns),
        failures=failures,
        warnings=warnings,
        data_docs_page=data_docs_page,
    )


def check_counts(validation: Mapping[str, Any]) -> dict[str, int]:
    """``check id -> unexpected rows`` for every map expectation that ran, passed or not."""
    counts: dict[str, int] = {}
    for item in validation["results"]:
        check = _check_id(item["expectation_config"])
        count = (item.get("result") or {}).get("unexpected_count")
        if check and count is not None:
            counts[check] = counts.get(check, 0) + int(count)
    return counts


def identity_nothing(table: str, declared: str, reason: str,
                     validation: Mapping[str, Any]) -> IdentityNothingTable:
    """Counts come from the suite's warning checks; None when they could not be evaluated
    (a missing ``_op`` column, say — which the critical column checks report as a failure)."""
    counts = check_counts(validation)
    return IdentityNothingTable(
        table=table,
        declared_replica_identity=declared,
        reason=reason,
        unkeyed_updates=counts.get(UNKEYED_UPDATES),
        unkeyed_deletes=counts.get(UNKEYED_DELETES),
    )


def combine_nothing(tables: list[IdentityNothingTable]) -> list[IdentityNothingTable]:
    """One entry per table, its counts summed over the chunks it was validated in."""
    out: dict[str, IdentityNothingTable] = {}
    for n in tables:
        if n.table not in out:
            out[n.table] = n
            continue
        seen = out[n.table]
        seen.unkeyed_updates = _add(seen.unkeyed_updates, n.unkeyed_updates)
        seen.unkeyed_deletes = _add(seen.unkeyed_deletes, n.unkeyed_deletes)
    return list(out.values())


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def order_across(last: tuple[int, int, int], first: tuple[int, int, int]
                 ) -> ExpectationOutcome | None:
    """Where two chunks of a table's changes meet: ``first`` (``_commit_lsn, _lsn, _seq``)
    must follow ``last`` as the suite's order checks require of neighbouring rows — commit
    LSN never going back, and inside a transaction ``(_lsn, _seq)`` strictly increasing.
    None when it does; else the failure, with both rows as samples."""
    if first[0] > last[0] or (first[0] == last[0] and first[1:] > last[1:]):
        return None
    names = ("_commit_lsn", "_lsn", "_seq")
    same = first[0] == last[0]
    return ExpectationOutcome(
        check="lsn_order_in_transaction" if same else "commit_lsn_order",
        expectation="expect_compound_columns_to_be_increasing_within_groups" if same
        else "expect_column_values_to_be_increasing",
        description="where two chunks of the table's changes meet, the second does not "
                    "follow the first in stream order",
        columns=list(names), severity="critical", unexpected_count=1, element_count=2,
        samples=[dict(zip(names, last, strict=True)), dict(zip(names, first, strict=True))])


def keys_across(keys: Sequence[str], unexpected: int, elements: int,
                samples: Sequence[Mapping[str, Any]]) -> ExpectationOutcome | None:
    """Keys a mirror holds in more than one of its chunks (``unexpected`` rows among
    ``elements``, as :func:`cdclake.quality.inputs.keys_in_chunks` counts them): the suite's
    uniqueness check of the whole table, where no chunk's own check can see it. None when
    there are none."""
    if not unexpected:
        return None
    return ExpectationOutcome(
        check="key_unique",
        expectation="expect_compound_columns_to_be_unique" if len(keys) > 1
        else "expect_column_values_to_be_unique",
        description="the mirror holds these keys more than once, in different chunks of "
                    "the rows checked",
        columns=list(keys), severity="critical", unexpected_count=unexpected,
        element_count=elements, samples=[{k: json_safe(v) for k, v in s.items()}
                                         for s in samples])


def _check_id(config: Mapping[str, Any]) -> str:
    return str(((config.get("meta") or {}).get("cdclake") or {}).get("check", ""))


def _outcome(item: Mapping[str, Any]) -> ExpectationOutcome:
    config = item["expectation_config"]
    kwargs = config.get("kwargs") or {}
    result = item.get("result") or {}
    exception = item.get("exception_info") or {}
    raised = exception.get("raised_exception")
    return ExpectationOutcome(
        check=_check_id(config) or config["type"],
        expectation=config["type"],
        description=config.get("description") or config["type"],
        columns=_columns(kwargs),
        severity=str(config.get("severity") or SEVERITY_CRITICAL),
        unexpected_count=result.get("unexpected_count"),
        element_count=result.get("element_count"),
        samples=_samples(result),
        observed=_observed(result),
        exception=str(exception.get("exception_message")) if raised else None,
    )


def _columns(kwargs: Mapping[str, Any]) -> list[str]:
    if "column" in kwargs:
        return [kwargs["column"]]
    if "column_list" in kwargs:
        return list(kwargs["column_list"])
    if "column_A" in kwargs:
        return [kwargs["column_A"], kwargs["column_B"]]
    if "column_set" in kwargs:
        return list(kwargs["column_set"])
    return []


def _samples(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Offending rows: the row locator plus the checked values when GX returns them."""
    located = result.get("partial_unexpected_index_list")
    if located and isinstance(located[0], dict):
        return [json_safe(dict(row)) for row in located]
    values = result.get("partial_unexpected_list") or []
    return [json_safe(dict(v) if isinstance(v, dict) else {"value": v}) for v in values]


def _observed(result: Mapping[str, Any]) -> Any:
    details = result.get("details") or {}
    if "mismatched" in details:
        # Extra columns never fail a subset check; the missing ones are what to report.
        mismatched = details["mismatched"]
        return json_safe({"missing": mismatched["missing"]} if "missing" in mismatched
                         else mismatched)
    return json_safe(result.get("observed_value"))


def json_safe(value: Any) -> Any:
    """Plain JSON values: GX leaves numpy scalars in row locators, and reports must dump."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        try:
            return json_safe(item())
        except (TypeError, ValueError):
            pass
    tolist = getattr(value, "tolist", None)  # numpy arrays (list columns)
    if callable(tolist):
        return json_safe(tolist())
    return str(value)
