"""The data dictionary's records: types, columns and relation versions.

Heap tuples in WAL carry no schema; these dataclasses carry what decoding a tuple needs (the
pg_attribute facts that drive deforming, the pg_type facts that drive output) and what the
output plugins print (quoted names, ``format_type`` names).  A :class:`RelationVersion` is valid
from ``valid_from`` (an LSN) until a newer version of the same relfilenode or oid replaces it.

Names that PostgreSQL's test_decoding prints are captured already quoted by the server
(``quote_ident``, ``format_type``), so the decoder never has to re-implement keyword quoting.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from cdclake.tuples.desc import Column, TypeInfo

# pg_class.relkind
RELKIND_TABLE = "r"
RELKIND_PARTITIONED = "p"
RELKIND_MATVIEW = "m"
RELKIND_TOAST = "t"
RELKIND_SEQUENCE = "S"
RELKIND_FOREIGN = "f"

# pg_class.relreplident
IDENTITY_DEFAULT = "d"
IDENTITY_NOTHING = "n"
IDENTITY_FULL = "f"
IDENTITY_INDEX = "i"

FIRST_NORMAL_OBJECT_ID = 16384


@dataclass(frozen=True, slots=True)
class RelationVersion:
    """A relation's definition as of ``valid_from``, found by relfilenode or by oid."""

    oid: int
    db_oid: int
    tablespace: int  #: spcOid as it appears in WAL block references (never 0)
    relfilenode: int  #: 0 for relations without storage (partitioned tables)
    schema: str
    name: str
    qualified: str  #: quote_ident(schema) || '.' || quote_ident(name)
    relkind: str
    persistence: str  #: p permanent, u unlogged, t temp
    replident: str
    columns: tuple[Column, ...]
    key_attnums: tuple[int, ...] = ()  #: replica identity index columns (DEFAULT/INDEX)
    toast_oid: int = 0
    toast_relfilenode: int = 0
    parent_oid: int = 0  #: partition parent (pg_inherits), 0 if none
    valid_from: int = 0  #: LSN from which this version applies
    dropped: bool = False  #: a tombstone: the relation was dropped at valid_from
    #: a transient heap that VACUUM FULL/CLUSTER/ALTER TABLE fills with a copy of this oid's rows
    rewrite_of: int = 0

    @property
    def is_user_table(self) -> bool:
        """Gate 4: only heap changes of ordinary/partition tables (and matviews) go on."""
        return (
            self.relkind in (RELKIND_TABLE, RELKIND_MATVIEW)
            and self.persistence == "p"
            and self.oid >= FIRST_NORMAL_OBJECT_ID
            and not self.rewrite_of
            and not self.dropped
        )

    def live_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if not c.dropped)

    def column_by_attnum(self, attnum: int) -> Column:
        return self.columns[attnum - 1]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RelationVersion:
        cols = tuple(Column(**{k: v for k, v in c.items() if k in _COLUMN_FIELDS})
                     for c in d.get("columns", ()))
        args = {k: v for k, v in d.items() if k in _RELATION_FIELDS and k != "columns"}
        args["key_attnums"] = tuple(args.get("key_attnums", ()))
        return cls(columns=cols, **args)


def type_from_json(d: dict[str, Any]) -> TypeInfo:
    args = {k: v for k, v in d.items() if k in _TYPE_FIELDS}
    args["enum_labels"] = {int(k): v for k, v in (d.get("enum_labels") or {}).items()}
    args["attributes"] = tuple(Column(**{k: v for k, v in a.items() if k in _COLUMN_FIELDS})
                               for a in d.get("attributes") or ())
    return TypeInfo(**args)


def type_to_json(t: TypeInfo) -> dict[str, Any]:
    d = asdict(t)
    d["enum_labels"] = {str(k): v for k, v in t.enum_labels.items()}
    return d


_COLUMN_FIELDS = frozenset(f.name for f in fields(Column))
_RELATION_FIELDS = frozenset(f.name for f in fields(RelationVersion))
_TYPE_FIELDS = frozenset(f.name for f in fields(TypeInfo))
