"""The mirrors' type mapping, in one place: the change stream's Arrow type of a PostgreSQL
column -> its Iceberg type, the Arrow type cdclake writes for each Iceberg type, and the
promotions Iceberg allows between them (docs/lake.md, "Types").

The change stream's Arrow types already encode the PostgreSQL type (:mod:`cdclake.tuples`'s
codecs choose them); the merge, the initial snapshot and schema evolution all read them
through here, so a type mapped one way in one room cannot be mapped another way in the next.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from cdclake.errors import LakeError


def iceberg_type(arrow_type: pa.DataType, *, table: str, column: str) -> IcebergType:
    """The Iceberg type for a change-stream column (field ids of nested types are provisional:
    the catalog assigns fresh ones)."""
    t = arrow_type
    if pa.types.is_boolean(t):
        return BooleanType()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return IntegerType()
    if pa.types.is_int64(t):
        return LongType()
    if pa.types.is_float32(t):
        return FloatType()
    if pa.types.is_float64(t):
        return DoubleType()
    if pa.types.is_decimal(t) and t.precision <= 38:
        return DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return BinaryType()
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return UUIDType()  # only uuid is mapped to 16-byte fixed binary
    if pa.types.is_date32(t):
        return DateType()
    if pa.types.is_time64(t) and t.unit == "us":
        return TimeType()
    if pa.types.is_timestamp(t) and t.unit == "us":
        if t.tz is None:
            return TimestampType()
        if t.tz in ("UTC", "+00:00", "Etc/UTC"):
            return TimestamptzType()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        element = iceberg_type(t.value_type, table=table, column=column)
        return ListType(element_id=1, element_type=element, element_required=False)
    raise LakeError(f"table {table}, column {column}: change-stream type {t} has no Iceberg "
                    "mapping (see docs/lake.md); exclude the table or extend cdclake.lake.typemap")


def arrow_type(t: IcebergType) -> pa.DataType:
    """The Arrow type cdclake writes for an Iceberg type (what pyiceberg accepts on append)."""
    if isinstance(t, BooleanType):
        return pa.bool_()
    if isinstance(t, IntegerType):
        return pa.int32()
    if isinstance(t, LongType):
        return pa.int64()
    if isinstance(t, FloatType):
        return pa.float32()
    if isinstance(t, DoubleType):
        return pa.float64()
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, StringType):
        return pa.string()
    if isinstance(t, BinaryType):
        return pa.binary()
    if isinstance(t, UUIDType):
        return pa.binary(16)
    if isinstance(t, DateType):
        return pa.date32()
    if isinstance(t, TimeType):
        return pa.time64("us")
    if isinstance(t, TimestamptzType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(t, TimestampType):
        return pa.timestamp("us")
    if isinstance(t, ListType):
        return pa.list_(arrow_type(t.element_type))
    if isinstance(t, MapType):
        return pa.map_(arrow_type(t.key_type), arrow_type(t.value_type))
    raise LakeError(f"Iceberg type {t} is not one cdclake writes")


def promoted(old: IcebergType, new: IcebergType) -> IcebergType | None:
    """The type the mirror column must have to hold values of ``new`` (``old`` when it already
    does, a promotion Iceberg allows otherwise), or None when neither works."""
    if old == new:
        return old
    ints = (IntegerType, LongType)
    if isinstance(old, ints) and isinstance(new, ints):
        return LongType()
    if isinstance(old, (FloatType, DoubleType)) and isinstance(new, (FloatType, DoubleType)):
        return DoubleType()
    if isinstance(old, DecimalType) and isinstance(new, DecimalType) and old.scale == new.scale:
        return old if old.precision >= new.precision else new
    if isinstance(old, ListType) and isinstance(new, ListType):
        return old if promoted(old.element_type, new.element_type) == old.element_type else None
    return None
