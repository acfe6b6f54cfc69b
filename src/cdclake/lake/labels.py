"""Enum labels renamed in the source are renamed in the mirror (``ALTER TYPE ... RENAME VALUE``).

PostgreSQL stores an enum value as the oid of its pg_enum row; the lake stores the label, the
text a reader wants. Renaming a label changes what every stored row shows in the source without
writing any WAL for those rows. So each enum column of the change stream says which label each
oid had under its relation version (:data:`cdclake.decoding.stream.ENUM_LABELS`), the mirror
keeps the labels its rows were written with (table property ``cdclake.enum-labels``), and the
merge turns every value — of the batch's rows and, when a label changed, of every stored row —
into the label its oid has now. Values kept as exact text (``_cdc_pg_text``) and enum values
inside ranges are text the merge does not rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from cdclake.decoding import stream

#: mirror table property: ``{"<attnum>": {"<pg_enum oid>": "<label>"}}`` of its stored rows
PROPERTY = "cdclake.enum-labels"

#: attnum -> pg_enum oid (as text) -> label
Labels = dict[int, dict[str, str]]
#: attnum -> label its rows may hold -> the label that oid has now
Translation = dict[int, dict[str, str]]


def version_labels(schema: pa.Schema, names: Mapping[str, int]) -> Labels:
    """The enum columns' labels of a change-stream part (``names``: column -> attnum)."""
    out: Labels = {}
    for f in schema:
        raw = (f.metadata or {}).get(stream.ENUM_LABELS)
        if raw is not None and f.name in names:
            out[names[f.name]] = json.loads(raw)
    return out


def stored_labels(properties: Mapping[str, str]) -> Labels:
    raw = properties.get(PROPERTY)
    return {} if not raw else {int(a): m for a, m in json.loads(raw).items()}


def property_value(labels: Labels) -> str:
    return json.dumps({str(a): labels[a] for a in sorted(labels)}, sort_keys=True)


def combine(layers: Iterable[Labels]) -> Labels:
    """Later layers win per attnum (the newest version that has the column)."""
    out: Labels = {}
    for layer in layers:
        out.update(layer)
    return out


def translation(old: Labels, new: Labels) -> Translation:
    """For each column, the labels whose oid is called something else now."""
    out: Translation = {}
    for attnum, before in old.items():
        after = new.get(attnum)
        if after is None:
            continue
        renamed = {label: after[oid] for oid, label in before.items()
                   if oid in after and after[oid] != label}
        if renamed:
            out[attnum] = renamed
    return out


def relabel(values: dict[int, Any] | None, tr: Translation) -> None:
    """Rename the labels of ``values`` (attnum -> value) in place."""
    if values is None:
        return
    for attnum, renamed in tr.items():
        v = values.get(attnum)
        if isinstance(v, str):
            values[attnum] = renamed.get(v, v)
        elif isinstance(v, list):
            values[attnum] = [renamed.get(x, x) if isinstance(x, str) else x for x in v]
