"""A mirror's schema: its fields by attnum, its system columns, and its evolution as the
source's changes.

Each column's Iceberg type is :mod:`cdclake.lake.typemap`'s (docs/lake.md has the table).
Values a column's type cannot hold go to the ``_cdc_pg_text`` system column as exact text
(map<string, string> keyed by attnum).
Every data field carries its PostgreSQL attnum in its doc (``cdclake:attnum=N``): attnums are
what survives a RENAME and is never reused after a DROP, so the evolution is decided by attnum,
not by name — a renamed column becomes an Iceberg rename (same field id, history intact), a
dropped one an Iceberg delete, a new attnum an add. A type change is a promotion when Iceberg
can make it (int->long, float->double, wider decimal), nothing when the mirror's type already
holds every value of the new one, and otherwise a replacement: the field is deleted and a new one
(a new field id, same name and attnum) added in the commit that writes the column's values
under the new type (:mod:`cdclake.lake.retype` says which values those are).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction
from pyiceberg.types import (
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    TimestamptzType,
)

from cdclake.catalog.model import RelationVersion
from cdclake.decoding.stream import PG_TEXT
from cdclake.errors import LakeError
from cdclake.lake.typemap import iceberg_type, promoted

#: system columns of a mirror table
CDC_COMMIT_LSN = "_cdc_commit_lsn"
CDC_COMMIT_TS = "_cdc_commit_ts"
#: attnum (decimal string) -> exact PostgreSQL text of the row's values without a typed value:
#: the stream's column, kept under its name in the mirror
CDC_PG_TEXT = PG_TEXT
#: extra system columns of a changelog table (the stream's own, renamed)
CDC_XID = "_cdc_xid"
CDC_LSN = "_cdc_lsn"
CDC_SEQ = "_cdc_seq"
CDC_OP = "_cdc_op"
CDC_OLD_KEY = "_cdc_old_key"
CDC_UNCHANGED_TOAST = "_cdc_unchanged_toast"

_ATTNUM_RE = re.compile(r"cdclake:attnum=(\d+)")


def attnum_doc(attnum: int) -> str:
    return f"cdclake:attnum={attnum}"


def field_attnum(field: NestedField) -> int | None:
    m = _ATTNUM_RE.search(field.doc or "")
    return int(m.group(1)) if m else None


def is_system(name: str) -> bool:
    return name.startswith("_cdc_")


# -- schemas --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataColumn:
    """A live PostgreSQL column as the lake sees it."""

    attnum: int
    name: str
    type: IcebergType


def data_columns(version: RelationVersion, arrow_schema: pa.Schema) -> list[DataColumn]:
    """The version's live columns with the Iceberg types of their change-stream columns."""
    table = f"{version.schema}.{version.name}"
    out = []
    for col in version.live_columns():
        if is_system(col.name):
            raise LakeError(f"table {table}: column {col.name!r} clashes with cdclake's system "
                            "columns (_cdc_*); rename it in the source or exclude the table")
        idx = arrow_schema.get_field_index(col.name)
        if idx < 0:
            raise LakeError(f"table {table}: column {col.name} (attnum {col.attnum}) is missing "
                            "from the change stream")
        out.append(DataColumn(col.attnum, col.name,
                              iceberg_type(arrow_schema.field(idx).type, table=table,
                                           column=col.name)))
    return out


def pg_text_type() -> MapType:
    """``_cdc_pg_text``: map<string, string> (ids provisional, as for nested data types)."""
    return MapType(key_id=1, key_type=StringType(), value_id=2, value_type=StringType(),
                   value_required=False)


def mirror_system_fields() -> list[tuple[str, IcebergType, str]]:
    return [(CDC_COMMIT_LSN, LongType(), "commit LSN of the last change to this row"),
            (CDC_COMMIT_TS, TimestamptzType(), "commit time of the last change to this row"),
            (CDC_PG_TEXT, pg_text_type(),
             "exact PostgreSQL text of values without a typed representation (their column "
             "is null), keyed by the column's attnum (cdclake:attnum=N in the field's doc)")]


def changelog_system_fields() -> list[tuple[str, IcebergType, str]]:
    return [*mirror_system_fields(),
            (CDC_XID, LongType(), "top-level transaction id"),
            (CDC_LSN, LongType(), "LSN of the change's WAL record"),
            (CDC_SEQ, IntegerType(), "position of the change inside its record"),
            (CDC_OP, StringType(), "I insert, U update, D delete, T truncate"),
            (CDC_OLD_KEY, StringType(), "old replica identity as JSON, null when not logged"),
            (CDC_UNCHANGED_TOAST, ListType(element_id=1, element_type=StringType(),
                                           element_required=False),
             "columns whose TOASTed value was unchanged and not logged")]


def _schema(columns: Sequence[DataColumn],
            system: Iterable[tuple[str, IcebergType, str]]) -> Schema:
    fields = [NestedField(i + 1, c.name, c.type, required=False, doc=attnum_doc(c.attnum))
              for i, c in enumerate(columns)]
    fields += [NestedField(len(fields) + i + 1, name, t, required=False, doc=doc)
               for i, (name, t, doc) in enumerate(system)]
    # create_table assigns fresh ids to every field, nested ones included
    return Schema(*_fresh_nested_ids(fields))


def _fresh_nested_ids(fields: list[NestedField]) -> list[NestedField]:
    next_id = len(fields) + 1
    out = []
    for f in fields:
        t = f.field_type
        if isinstance(t, ListType):
            t = ListType(element_id=next_id, element_type=t.element_type,
                         element_required=t.element_required)
            next_id += 1
        elif isinstance(t, MapType):
            t = MapType(key_id=next_id, key_type=t.key_type, value_id=next_id + 1,
                        value_type=t.value_type, value_required=t.value_required)
            next_id += 2
        out.append(NestedField(f.field_id, f.name, t, required=f.required, doc=f.doc))
    return out


def iceberg_schema(version: RelationVersion, arrow_schema: pa.Schema) -> Schema:
    """The mirror table's schema for a relation version and its change-stream schema."""
    return _schema(data_columns(version, arrow_schema), mirror_system_fields())


def changelog_schema(version: RelationVersion, arrow_schema: pa.Schema) -> Schema:
    """The changelog table's schema: the data columns and every stream system column."""
    return _schema(data_columns(version, arrow_schema), changelog_system_fields())


def mirror_fields(schema: Schema, table: str) -> dict[int, NestedField]:
    """attnum -> field of a mirror (or changelog) schema; undocumented data fields are refused,
    because a column cdclake cannot tie to an attnum cannot be evolved or filled correctly."""
    out: dict[int, NestedField] = {}
    for f in schema.fields:
        if is_system(f.name):
            continue
        attnum = field_attnum(f)
        if attnum is None:
            raise LakeError(f"mirror of {table}: column {f.name!r} carries no cdclake attnum "
                            "(was it added outside cdclake?); drop it or rebuild the mirror")
        out[attnum] = f
    return out


def field_types(schema: Schema, table: str) -> dict[int, IcebergType]:
    """attnum -> the type of each data field of a mirror (or changelog) schema."""
    return {attnum: f.field_type for attnum, f in mirror_fields(schema, table).items()}


# -- evolution ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One step of the evolution, by attnum; ``describe`` goes into the merge report."""

    kind: str  #: add, delete, rename, promote, replace, add-system (attnum 0)
    attnum: int
    name: str  #: the current Iceberg name (for add: the new name)
    new_name: str = ""
    type: IcebergType | None = None

    def describe(self) -> str:
        if self.kind == "add":
            return f"add column {self.name} {self.type} (attnum {self.attnum})"
        if self.kind == "add-system":
            return f"add system column {self.name} {self.type}"
        if self.kind == "delete":
            return f"drop column {self.name} (attnum {self.attnum})"
        if self.kind == "rename":
            return f"rename column {self.name} to {self.new_name} (attnum {self.attnum})"
        if self.kind == "replace":
            return (f"replace column {self.name} by a new field {self.new_name} {self.type} "
                    f"(attnum {self.attnum})")
        return f"promote column {self.name} to {self.type} (attnum {self.attnum})"


def plan_evolution(current: Schema, columns: Sequence[DataColumn], table: str,
                   system: Sequence[tuple[str, IcebergType, str]] = ()
                   ) -> list[SchemaChange]:
    """Steps that take the mirror from ``current`` to ``columns``: the data columns of the
    relation version the commit ends at, each typed as the values the commit leaves in it
    hold it (:func:`cdclake.lake.retype.held_through`). A field keeps its id when its type
    holds those values or Iceberg can promote it to one that does; otherwise it is replaced,
    which only a commit that writes every row's value of the column may do. System columns of
    ``system`` the table lacks (a mirror created by an older cdclake) are added."""
    fields = mirror_fields(current, table)
    final = {c.attnum: c for c in columns}
    changes: list[SchemaChange] = []
    for attnum, f in fields.items():
        if attnum not in final:
            changes.append(SchemaChange("delete", attnum, f.name))
            continue
        c = final[attnum]
        kept = promoted(f.field_type, c.type)
        if kept is None:
            changes.append(SchemaChange("replace", attnum, f.name, new_name=c.name, type=c.type))
            continue
        if c.name != f.name:
            changes.append(SchemaChange("rename", attnum, f.name, new_name=c.name))
        if kept != f.field_type:
            changes.append(SchemaChange("promote", attnum, f.name, type=kept))
    for attnum, c in final.items():
        if attnum not in fields:
            changes.append(SchemaChange("add", attnum, c.name, type=c.type))
    names = {f.name for f in current.fields}
    changes += [SchemaChange("add-system", 0, name, type=t) for name, t, _ in system
                if name not in names]
    return changes


def apply_evolution(tx: Transaction, changes: Sequence[SchemaChange]) -> None:
    """Stage the steps in ``tx``. Deletes and renames go through temporary names first, so a
    swap (a<->b) or a drop-then-re-add of the same name never collides half-way; a replaced
    field is deleted there too, and its new field takes the old one's place."""
    if not changes:
        return
    renames = [c for c in changes if c.kind == "rename"]
    promotes = [c for c in changes if c.kind == "promote"]
    temp = {c.attnum: f"_cdc_tmp_{c.attnum}" for c in renames}
    order = [f.name for f in tx.table_metadata.schema().fields]
    gone = {c.name for c in changes if c.kind in ("delete", "replace")}
    named = {c.name: temp[c.attnum] for c in renames}  # the names after the first update
    with tx.update_schema() as us:
        for c in changes:
            if c.kind in ("delete", "replace"):
                us.delete_column(c.name)
        for c in renames:
            us.rename_column(c.name, temp[c.attnum])
    with tx.update_schema() as us:
        for c in promotes:
            name = temp.get(c.attnum, c.name)
            assert c.type is not None
            us.update_column(name, field_type=c.type)  # type: ignore[arg-type]
        for c in renames:
            us.rename_column(temp[c.attnum], c.new_name)
        for c in changes:
            if c.kind in ("add", "replace"):
                assert c.type is not None
                name = c.new_name if c.kind == "replace" else c.name
                us.add_column(name, c.type, doc=attnum_doc(c.attnum))
            if c.kind == "replace":
                after = order[order.index(c.name) + 1:]
                following = next((n for n in after if n not in gone), None)
                if following is not None:
                    us.move_before(name, named.get(following, following))
        docs = {name: doc for name, _, doc in (*mirror_system_fields(),
                                                *changelog_system_fields())}
        for c in changes:
            if c.kind == "add-system":
                assert c.type is not None
                us.add_column(c.name, c.type, doc=docs.get(c.name))
