"""attmissingval outlives a rewrite for the lake: rows a mirror stored from before the
ADD COLUMN still read it, while the decoder keeps reading the catalog's has_missing."""

from __future__ import annotations

import dataclasses
import json

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import Column, RelationVersion


def _col(attnum: int, name: str, **kw: object) -> Column:
    return Column(attnum=attnum, name=name, quoted=name, type_oid=23, typmod=-1, attlen=4,
                  attalign="i", attbyval=True, **kw)  # type: ignore[arg-type]


def _message(v: RelationVersion) -> bytes:
    return json.dumps({"kind": "relations", "db_oid": 5, "relations": [v.to_json()]}).encode()


def test_missing_text_is_kept_after_a_rewrite_cleared_it() -> None:
    base = RelationVersion(oid=16400, db_oid=5, tablespace=1663, relfilenode=16400,
                           schema="public", name="t", qualified="public.t", relkind="r",
                           persistence="p", replident="d", columns=(_col(1, "id"),),
                           key_attnums=(1,))
    added = dataclasses.replace(base, columns=(
        _col(1, "id"), _col(2, "c", has_missing=True, missing_text="5")))
    # VACUUM FULL materialized c and cleared attmissingval; a later DDL describes that
    cleared = dataclasses.replace(base, columns=(_col(1, "id"), _col(2, "c"), _col(3, "d")))
    retyped = dataclasses.replace(base, columns=(
        _col(1, "id"), dataclasses.replace(_col(2, "c"), type_oid=20, attlen=8), _col(3, "d")))
    d = Dictionary()
    d.apply_message(0x100, _message(added))
    d.apply_message(0x200, _message(cleared))
    later = d.relation_for_oid(16400, 0x200)
    assert later is not None
    c = later.columns[1]
    assert (c.has_missing, c.missing_text) == (False, "5")
    assert later.columns[2].missing_text is None
    d.apply_message(0x300, _message(retyped))  # another type: the old text would not parse
    last = d.relation_for_oid(16400, 0x300)
    assert last is not None and last.columns[1].missing_text is None
