"""A tuple descriptor's facts: the pg_type and pg_attribute rows deforming and output read.

Heap tuples carry no schema. Deforming a tuple (:mod:`cdclake.tuples.heap`) needs each
attribute's length and alignment, and turning a datum into text or an Arrow value
(:mod:`cdclake.tuples.codecs`) needs its type's output function and related types: that is
all these two records hold. They sit with the tuple code, below the catalog, as PostgreSQL's
``TupleDesc`` sits below its catalog caches; the data dictionary (:mod:`cdclake.catalog`)
builds them from the ``cdclake.ddl`` messages and versions them by LSN.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """pg_type facts needed to turn a datum into a value (by output function)."""

    oid: int
    name: str  #: format_type(oid, NULL): what test_decoding prints, e.g. "character varying"
    output: str  #: typoutput proc name, selects the codec: "int4out", "array_out", "enum_out"
    typlen: int
    typbyval: bool
    typalign: str  #: c, s, i, d
    typtype: str  #: b base, d domain, e enum, r range, m multirange, c composite, p pseudo
    typcategory: str
    element: int = 0  #: typelem for arrays (and fixed-length "array-like" types such as name)
    delimiter: str = ","  #: typdelim, used by array_out
    base: int = 0  #: typbasetype of a domain
    range_subtype: int = 0  #: rngsubtype of a range; for a multirange, its range type
    enum_labels: dict[int, str] = field(default_factory=dict)  #: pg_enum oid -> label
    namespace: str = "pg_catalog"
    #: a composite type's pg_attribute rows (dropped ones keep their slot, as in a table)
    attributes: tuple[Column, ...] = ()

    def dependencies(self) -> tuple[int, ...]:
        """The types whose facts decide how this one's values print: a codec built for this
        type reads them too, so a change to any of them is a change to this one."""
        deps = [self.element, self.base, self.range_subtype]
        deps.extend(a.type_oid for a in self.attributes if not a.dropped)
        return tuple(d for d in deps if d)


@dataclass(frozen=True, slots=True)
class Column:
    """One pg_attribute row (attnum > 0), dropped columns included: they keep their slot."""

    attnum: int
    name: str  #: attname as stored
    quoted: str  #: quote_ident(attname): what test_decoding prints
    type_oid: int
    typmod: int
    attlen: int
    attalign: str
    attbyval: bool
    dropped: bool = False
    not_null: bool = False
    generated: str = ""  #: attgenerated: '' or 's' (stored) or 'v' (virtual, PG 18)
    #: attmissingval as the type's text output, for rows written before ADD COLUMN ... DEFAULT
    missing_text: str | None = None
    has_missing: bool = False


@dataclass(frozen=True, slots=True)
class MissingValue:
    """A column added (ADD COLUMN ... DEFAULT) after the tuple was written: the tuple is
    shorter than the relation, and PostgreSQL supplies ``attmissingval`` instead of NULL.
    ``text`` is that value's text output, as captured with the dictionary (the column's
    ``missing_text``)."""

    text: str
