"""Column metrics that pyiceberg can compute for the values a mirror holds.

pyiceberg computes a data file's lower/upper bounds from the Parquet statistics through Python
objects (``Statistics.min``): a ``date`` or ``datetime`` outside years 1..9999 — a BC date,
year 10000 or later, DuckDB's ±infinity encodings — makes the whole append fail. Before
appending, :func:`guard_metrics` finds the top-level date/time/timestamp columns whose values
leave that range and sets the standard Iceberg property
``write.metadata.metrics.column.<name>=counts`` for them in the same transaction: their files
keep value and null counts but no bounds (so such a column no longer prunes files; the merge
stays correct, bounds only ever narrow what it reads). The decision is made on the data being
written, so it also holds after a column is renamed; other engines honour the property too.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import TableProperties, Transaction

#: what Python's date/datetime/time hold, in Arrow storage units (days, µs since 1970 / midnight)
_DATE_RANGE = (-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31
_TIMESTAMP_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)
_TIME_RANGE = (0, 86_399_999_999)
_NO_BOUNDS = ("counts", "none")


def _python_range(t: pa.DataType) -> tuple[int, int] | None:
    if pa.types.is_date32(t):
        return _DATE_RANGE
    if pa.types.is_timestamp(t):
        return _TIMESTAMP_RANGE
    if pa.types.is_time64(t):
        return _TIME_RANGE
    return None


def needs_counts_only(column: pa.ChunkedArray | pa.Array) -> bool:
    """Does the column hold a value pyiceberg cannot turn into a Python bound?"""
    bounds = _python_range(column.type)
    if bounds is None or len(column) == column.null_count:
        return False
    storage = pa.int32() if pa.types.is_date32(column.type) else pa.int64()
    lo_hi = pc.min_max(column.cast(storage))
    lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    return lo < bounds[0] or hi > bounds[1]


def guard_metrics(tx: Transaction, data: pa.Table) -> list[str]:
    """Switch the columns of ``data`` that need it to counts-only metrics in ``tx`` (before
    ``tx.append(data)``); returns their names."""
    props = tx.table_metadata.properties
    default = props.get(TableProperties.DEFAULT_WRITE_METRICS_MODE,
                        TableProperties.DEFAULT_WRITE_METRICS_MODE_DEFAULT).strip().lower()
    changed: dict[str, str] = {}
    for name in data.column_names:
        key = f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}.{name}"
        mode = props.get(key, default).strip().lower()
        if mode not in _NO_BOUNDS and needs_counts_only(data.column(name)):
            changed[key] = "counts"
    if changed:
        tx.set_properties(changed)
    prefix = f"{TableProperties.METRICS_MODE_COLUMN_CONF_PREFIX}."
    return sorted(k.removeprefix(prefix) for k in changed)
