"""Test-only: pg_type facts of the built-in types the unit tests use (as PostgreSQL 15/18 have
them), so codecs can be built without a server."""

from __future__ import annotations

from cdclake.catalog.model import TypeInfo

_ROWS = [
    # oid, format_type, typoutput, typlen, byval, align, typtype, category, elem
    (16, "boolean", "boolout", 1, True, "c", "b", "B", 0),
    (17, "bytea", "byteaout", -1, False, "i", "b", "U", 0),
    (18, '"char"', "charout", 1, True, "c", "b", "Z", 0),
    (19, "name", "nameout", 64, False, "c", "b", "S", 18),
    (20, "bigint", "int8out", 8, True, "d", "b", "N", 0),
    (21, "smallint", "int2out", 2, True, "s", "b", "N", 0),
    (23, "integer", "int4out", 4, True, "i", "b", "N", 0),
    (25, "text", "textout", -1, False, "i", "b", "S", 0),
    (26, "oid", "oidout", 4, True, "i", "b", "N", 0),
    (700, "real", "float4out", 4, True, "i", "b", "N", 0),
    (701, "double precision", "float8out", 8, True, "d", "b", "N", 0),
    (1082, "date", "date_out", 4, True, "i", "b", "D", 0),
    (1083, "time without time zone", "time_out", 8, True, "d", "b", "D", 0),
    (1114, "timestamp without time zone", "timestamp_out", 8, True, "d", "b", "D", 0),
    (1184, "timestamp with time zone", "timestamptz_out", 8, True, "d", "b", "D", 0),
    (1186, "interval", "interval_out", 16, False, "d", "b", "T", 0),
    (1700, "numeric", "numeric_out", -1, False, "i", "b", "N", 0),
    (2950, "uuid", "uuid_out", 16, False, "c", "b", "U", 0),
    (3802, "jsonb", "jsonb_out", -1, False, "i", "b", "U", 0),
    (2249, "record", "record_out", -1, False, "d", "p", "P", 0),
    (1007, "integer[]", "array_out", -1, False, "i", "b", "A", 23),
    (1009, "text[]", "array_out", -1, False, "i", "b", "A", 25),
    (1231, "numeric[]", "array_out", -1, False, "i", "b", "A", 1700),
    (1115, "timestamp without time zone[]", "array_out", -1, False, "d", "b", "A", 1114),
    (1182, "date[]", "array_out", -1, False, "i", "b", "A", 1082),
    (1000, "boolean[]", "array_out", -1, False, "i", "b", "A", 16),
    (1001, "bytea[]", "array_out", -1, False, "i", "b", "A", 17),
    (2951, "uuid[]", "array_out", -1, False, "i", "b", "A", 2950),
    (1021, "real[]", "array_out", -1, False, "i", "b", "A", 700),
]

BUILTIN: dict[int, TypeInfo] = {
    oid: TypeInfo(oid=oid, name=name, output=output, typlen=typlen, typbyval=byval,
                  typalign=align, typtype=typtype, typcategory=cat, element=elem)
    for oid, name, output, typlen, byval, align, typtype, cat, elem in _ROWS
}
BUILTIN[3904] = TypeInfo(oid=3904, name="int4range", output="range_out", typlen=-1,
                         typbyval=False, typalign="i", typtype="r", typcategory="R",
                         range_subtype=23)
BUILTIN[90001] = TypeInfo(oid=90001, name="mood", output="enum_out", typlen=4, typbyval=True,
                          typalign="i", typtype="e", typcategory="E",
                          enum_labels={90002: "sad", 90003: "happy"})
BUILTIN[90010] = TypeInfo(oid=90010, name="posint", output="int4out", typlen=4, typbyval=True,
                          typalign="i", typtype="d", typcategory="N", base=23)
BUILTIN[90020] = TypeInfo(oid=90020, name="pair", output="record_out", typlen=-1,
                          typbyval=False, typalign="d", typtype="c", typcategory="C")
