"""The signal for a valid value that its column's Arrow type cannot hold.

Some PostgreSQL values have no exact typed representation in the column's Arrow/Iceberg type:
a two-dimensional ``integer[]`` in a ``list<int32>`` column, an array whose lower bound is not
1, ``NaN`` in a ``numeric(p,s)`` (decimal) column, ``time '24:00:00'``, a timestamp past the
int64 microseconds counted from 1970. Such a value is not an error — PostgreSQL stored it — and
must not stop a run: a codec's ``value`` raises :class:`NotTypeable`, and the row builder writes
NULL in the typed column and the value's exact text (the codec's ``text``, what test_decoding
prints) in the row's ``_cdc_pg_text`` map (docs/lake.md).

It is deliberately not a ``ValueError`` (nor a :class:`~cdclake.errors.TupleDecodeError`): the
codec guard turns low-level format errors into TupleDecodeError, and this must pass through it
untouched. Raising it costs only on those rare values; the hot path pays nothing.

:class:`NoTextOutput` is the one value cdclake cannot keep even as text: one of a type whose
output function cdclake does not know (a base type from an extension, written in C), so the
WAL's bytes say nothing cdclake can print. The row builder marks it (an ``_cdc_pg_text`` entry
with no text) and the lake quarantines that table alone (docs/lake.md); a plugin that must
print it (test_decoding) stops with the error's one line.
"""

from __future__ import annotations

from cdclake.errors import UnsupportedTypeError


class NotTypeable(Exception):
    """A valid value without a typed representation in its column's Arrow type."""


class NoTextOutput(UnsupportedTypeError, NotTypeable):
    """A value of a type whose output function cdclake does not know: it has no text either."""
