"""The merge's rules, written once for every engine.

A table's changes reach its mirror through one of three engines: the replay of
:mod:`cdclake.lake.apply` (a change at a time, on Python values), the columnar merge
(:mod:`cdclake.lake.columnar`, on Arrow arrays) and the Spark merge
(:mod:`cdclake.lake.sparkmerge`, on Spark columns). The rules that decide what a change does
are the same for all three, and are written here once, as expressions over a
:class:`Dialect`: the same function is a predicate on one change's values (:data:`PY`), an
Arrow kernel over a batch's columns (:data:`ARROW`), or a Spark column the executors evaluate
(``sparkmerge.SPARK``: the Spark dialect lives with the Spark merge, as the pyiceberg merge
imports nothing of Spark). A rule changed here changes
in every engine (``tests/unit/lake/test_rules.py`` evaluates each in every dialect). The
initial snapshot's handoff is one of these rules too
(:func:`cdclake.lake.visibility.in_snapshot`).

The rules:

- **Order**: a table's changes apply in the stream's order, :data:`ORDER`; a change is
  :func:`before` another by that order.
- **Events**: every change is an event on a key: INSERT and UPDATE set the new key's row
  (:func:`sets`); DELETE takes the old key, and so does an UPDATE whose logged old key is not
  its new one (:func:`takes`, :func:`key_changed`); per key the last event decides.
- **Look-ups**: an UPDATE or a DELETE looks up the row it changes (:func:`looks_up`) by its
  old key when that was logged, else by its new one (:func:`looked_up`); ``not_found`` counts
  those whose row is not there.
- **Last per key**: of a key's events, the last in the stream's order decides its row
  (:func:`last_per_key`).
- **TOAST carry**: a value an UPDATE left unchanged (TOAST, not logged) is the value of the
  key's last earlier event that carried one, else the mirror row's (:func:`carry`).

The last two are rules over a batch's events, not over one change's values: they take a
frame (a table of events) and one operation of it each, :meth:`Lasts.last_in_group` and
:meth:`Carries.previous_in_group`. The Spark dialect has both; the Arrow dialect the first
(the columnar merge hands unchanged TOAST to the replay). The replay applies one change at a
time to the mirror's rows, so its rows are these rules' sequential form — a key's row is its
last change's, an unchanged value comes from the row the change replaces — and that form is
what ``tests/support/rule_cases.py`` holds each dialect's frames to.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import reduce
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from cdclake.decoding import stream

#: the stream's order of changes: commit LSN, then the change's LSN, then its place in a
#: multi-insert
ORDER = (stream.COMMIT_LSN, stream.LSN, stream.SEQ)
#: the operations that set their new key's row
SETS = (stream.OP_INSERT, stream.OP_UPDATE)
#: the operations that look up the row they change
LOOKS_UP = (stream.OP_UPDATE, stream.OP_DELETE)


class Dialect:
    """The operations a rule is written with, for one kind of value. This one is Python's:
    a rule evaluates one change's values (ints, strings, None)."""

    def and_(self, a: Any, b: Any) -> Any:
        return a and b

    def or_(self, a: Any, b: Any) -> Any:
        return a or b

    def not_(self, a: Any) -> Any:
        return not a

    def eq(self, a: Any, b: Any) -> Any:
        return a == b

    def lt(self, a: Any, b: Any) -> Any:
        return a < b

    def gt(self, a: Any, b: Any) -> Any:
        return a > b

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def sub(self, a: Any, b: Any) -> Any:
        return a - b

    def where(self, condition: Any, a: Any, b: Any) -> Any:
        return a if condition else b

    def isin(self, a: Any, values: Collection[Any]) -> Any:
        return a in values

    def present(self, a: Any) -> Any:
        """Not null."""
        return a is not None

    def distinct(self, a: Any, b: Any) -> Any:
        """``a IS DISTINCT FROM b``: null is a value here."""
        return a != b


class Lasts(Protocol):
    """A dialect that finds the last row of each group of a frame (Arrow's, Spark's)."""

    def last_in_group(self, frame: Any, keys: Sequence[str], order: Sequence[str]) -> Any:
        """Of ``frame``'s rows, the last by ``order`` of each group of equal ``keys``."""
        ...


class Carries(Protocol):
    """A dialect that finds, for each row of a frame, the last earlier row of its group with
    a property (Spark's); with the operations :func:`carry` combines it with."""

    def and_(self, a: Any, b: Any) -> Any: ...

    def not_(self, a: Any) -> Any: ...

    def where(self, condition: Any, a: Any, b: Any) -> Any: ...

    def previous_in_group(self, frame: Any, keys: Sequence[str], order: Sequence[str],
                          when: Any, value: Any) -> tuple[Any, Any]:
        """For each row of ``frame``: whether a row before it by ``order`` in its group of
        equal ``keys`` has ``when``, and the last such row's ``value`` (a null is a value)."""
        ...


class ArrowDialect(Dialect):
    """Arrow arrays (and Python scalars beside them): a rule is a kernel over a batch."""

    def and_(self, a: Any, b: Any) -> Any:
        return pc.and_(a, b)

    def or_(self, a: Any, b: Any) -> Any:
        return pc.or_(a, b)

    def not_(self, a: Any) -> Any:
        return pc.invert(a)

    def eq(self, a: Any, b: Any) -> Any:
        return pc.equal(a, b)

    def lt(self, a: Any, b: Any) -> Any:
        return pc.less(a, b)

    def gt(self, a: Any, b: Any) -> Any:
        return pc.greater(a, b)

    def add(self, a: Any, b: Any) -> Any:
        return pc.add(a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return pc.subtract(a, b)

    def where(self, condition: Any, a: Any, b: Any) -> Any:
        return pc.if_else(condition, a, b)

    def isin(self, a: Any, values: Collection[Any]) -> Any:
        return pc.is_in(a, value_set=pa.array(list(values), a.type))

    def present(self, a: Any) -> Any:
        return pc.is_valid(a)

    def distinct(self, a: Any, b: Any) -> Any:
        both = pc.and_(pc.is_valid(a), pc.is_valid(b))
        return pc.if_else(both, pc.not_equal(a, b), pc.xor(pc.is_valid(a), pc.is_valid(b)))

    def last_in_group(self, frame: Any, keys: Sequence[str], order: Sequence[str]) -> Any:
        """``frame`` holds the keys and ``order``, one integer column unique within a group (a
        rank in the stream's order, as the columnar merge's events do): the last row is the
        one with its largest, which Arrow's hash aggregation finds without sorting (a bulk
        load's batch holds millions of events)."""
        (rank,) = order
        out = frame.group_by(list(keys), use_threads=False).aggregate([(rank, "max")])
        return pa.table([*(out.column(k) for k in keys), out.column(f"{rank}_max")],
                        names=[*keys, rank]).select(frame.column_names)


PY = Dialect()
ARROW = ArrowDialect()


def before(d: Dialect, a: Sequence[Any], b: Sequence[Any]) -> Any:
    """Whether ``a`` comes before ``b`` in the stream's order (each: the :data:`ORDER`
    columns' values, in that order): compared field by field, the first that differs
    decides."""
    (x, *xs), (y, *ys) = a, b
    if not xs:
        return d.lt(x, y)
    return d.or_(d.lt(x, y), d.and_(d.eq(x, y), before(d, xs, ys)))


def sets(d: Dialect, op: Any) -> Any:
    """Whether the change sets its new key's row (INSERT, UPDATE)."""
    return d.isin(op, SETS)


def key_changed(d: Dialect, old: Sequence[Any], new: Sequence[Any]) -> Any:
    """Whether an UPDATE's old key (its columns' values ``old``; null when it was not logged)
    was logged and is not its new key ``new``."""
    differs = reduce(d.or_, [d.distinct(o, n) for o, n in zip(old, new, strict=True)])
    return d.and_(d.present(old[0]), differs)


def takes(d: Dialect, op: Any, old: Sequence[Any], new: Sequence[Any]) -> Any:
    """Whether the change takes its old key's row: a DELETE, or an UPDATE that changed the
    key (:func:`key_changed`)."""
    return d.or_(d.eq(op, stream.OP_DELETE),
                 d.and_(d.eq(op, stream.OP_UPDATE), key_changed(d, old, new)))


def looks_up(d: Dialect, op: Any) -> Any:
    """Whether the change looks up the row it changes (UPDATE, DELETE)."""
    return d.isin(op, LOOKS_UP)


def looked_up(d: Dialect, logged: Any, old: Any, new: Any) -> Any:
    """The key a look-up uses: the old key ``old`` when it was logged (``logged``), else the
    new one (a key, or one of its columns)."""
    return d.where(logged, old, new)


def last_per_key(d: Lasts, events: Any, keys: Sequence[str],
                 order: Sequence[str] = ORDER) -> Any:
    """Per key, the event the stream puts last: it alone decides the key's row (an INSERT or
    UPDATE writes it, a DELETE removes it). ``order``: the :data:`ORDER` columns, or one rank
    in that order."""
    return d.last_in_group(events, keys, order)


def carry(d: Carries, events: Any, keys: Sequence[str], value: Any, unchanged: Any,
          setting: Any, order: Sequence[str] = ORDER) -> tuple[Any, Any]:
    """A column's ``value`` in each event once unchanged TOAST values are carried: where the
    event left it ``unchanged``, the value of the key's last earlier event that set the row
    (``setting``) with a value of its own. Also whether it is still unchanged — no earlier
    event carried one: the mirror's row has it (or nothing has: the value is lost)."""
    carries = d.and_(setting, d.not_(unchanged))
    found, previous = d.previous_in_group(events, keys, order, carries, value)
    return d.where(d.and_(unchanged, found), previous, value), d.and_(unchanged, d.not_(found))
