"""Test-only: ``cdclake.ddl`` message payloads as install.sql builds them, without a server."""

from __future__ import annotations

import json
from typing import Any

INT4 = {"oid": 23, "name": "integer", "output": "int4out", "typlen": 4, "typbyval": True,
        "typalign": "i", "typtype": "b", "typcategory": "N"}
TEXT = {"oid": 25, "name": "text", "output": "textout", "typlen": -1, "typbyval": False,
        "typalign": "i", "typtype": "b", "typcategory": "S"}
INT8 = {"oid": 20, "name": "bigint", "output": "int8out", "typlen": 8, "typbyval": True,
        "typalign": "d", "typtype": "b", "typcategory": "N"}
MOOD_OID, MOOD_ARRAY, MOOD_DOMAIN, COMPOSITE, COLOR = 70001, 70000, 70010, 70020, 70030


def enum(labels: dict[int, str], name: str = "mood", namespace: str = "public",
         oid: int = MOOD_OID) -> dict[str, Any]:
    return {"oid": oid, "name": name, "output": "enum_out", "typlen": 4, "typbyval": True,
            "typalign": "i", "typtype": "e", "typcategory": "E", "namespace": namespace,
            "enum_labels": {str(k): v for k, v in labels.items()}}


def array_of(element: int, name: str, oid: int) -> dict[str, Any]:
    return {"oid": oid, "name": name, "output": "array_out", "typlen": -1, "typbyval": False,
            "typalign": "i", "typtype": "b", "typcategory": "A", "element": element}


def domain(base: int, name: str, oid: int = MOOD_DOMAIN) -> dict[str, Any]:
    return {"oid": oid, "name": name, "output": "enum_out", "typlen": 4, "typbyval": True,
            "typalign": "i", "typtype": "d", "typcategory": "E", "base": base}


def composite(attrs: list[tuple[str, int]], name: str = "pair") -> dict[str, Any]:
    return {"oid": COMPOSITE, "name": name, "output": "record_out", "typlen": -1,
            "typbyval": False, "typalign": "d", "typtype": "c", "typcategory": "C",
            "attributes": [{"attnum": i + 1, "name": n, "quoted": n, "type_oid": t,
                            "typmod": -1, "attlen": 4 if t == 23 else -1, "attalign": "i",
                            "attbyval": t == 23, "dropped": False}
                           for i, (n, t) in enumerate(attrs)]}


def column(attnum: int, name: str, type_oid: int, attlen: int = 4) -> dict[str, Any]:
    return {"attnum": attnum, "name": name, "quoted": name, "type_oid": type_oid, "typmod": -1,
            "attlen": attlen, "attalign": "i", "attbyval": attlen > 0}


def relation(oid: int, name: str, columns: list[dict[str, Any]]) -> dict[str, Any]:
    return {"oid": oid, "db_oid": 5, "tablespace": 1663, "relfilenode": oid, "schema": "public",
            "name": name, "qualified": f"public.{name}", "relkind": "r", "persistence": "p",
            "replident": "d", "key_attnums": [1], "columns": columns}


def message(kind: str = "relations", relations: list[dict[str, Any]] | None = None,
            types: list[dict[str, Any]] | None = None,
            changed: list[int] | None = None) -> bytes:
    """``changed=None`` leaves ``changed_types`` out, as messages of an older install do."""
    msg: dict[str, Any] = {"kind": kind, "relations": relations or [], "types": types or []}
    if changed is not None:
        msg["changed_types"] = changed
    if kind == "dictionary":
        msg.update(db_oid=5, default_tablespace=1663, server_version_num=150000)
    return json.dumps(msg).encode()
