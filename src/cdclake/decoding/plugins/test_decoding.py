"""The ``test_decoding`` output plugin: PostgreSQL's contrib/test_decoding text, line for line.

With the options cdclake's oracle uses (include-xids on, skip-empty-xacts on): ``BEGIN <xid>``
is written lazily before a transaction's first output line and ``COMMIT <xid>`` only if
something was written (what counts depends on the server version, see messages_open_xact);
rows print as ``table <schema>.<name>: INSERT: col[type]:value ...``
with test_decoding's literal rules (numbers bare, bool true/false, bit strings ``B'..'``,
everything else single-quoted with quotes doubled), ``old-key:``/``new-tuple:`` for updates that
logged an old identity, ``(no-tuple-data)`` and ``unchanged-toast-datum``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cdclake import native
from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.decoding.changes import DELETE, INSERT, Change, Truncate, TxnInfo
from cdclake.decoding.rows import (
    UNCHANGED_TOAST,
    LayoutCache,
    LiveColumn,
    RowLayout,
    column_payload,
)
from cdclake.tuples.codecs import FORMAT_ERRORS
from cdclake.tuples.heap import MissingValue
from cdclake.wal.record import WalTuple

# pg_type oids whose output test_decoding prints without quotes
_BARE = frozenset({21, 23, 20, 26, 700, 701, 1700})  # int2 int4 int8 oid float4 float8 numeric
_BIT = frozenset({1560, 1562})  # bit varbit
_BOOL = 16


def literal(type_oid: int, text: str) -> str:
    """print_literal(): how test_decoding quotes a value's text output."""
    if type_oid in _BARE:
        return text
    if type_oid in _BIT:
        return f"B'{text}'"
    if type_oid == _BOOL:
        return "true" if text == "t" else "false"
    return "'" + text.replace("'", "''") + "'"


_Step = tuple[int, str, Callable[[object], str], bool, LiveColumn]


def _literal_fn(type_oid: int, text: Callable[[object], object]) -> Callable[[object], str]:
    """``literal(type_oid, text(v))`` as one call, the per-value work of every change line."""
    if type_oid in _BARE:
        return text  # type: ignore[return-value]
    if type_oid in _BIT:
        return lambda v: f"B'{text(v)}'"
    if type_oid == _BOOL:
        return lambda v: "true" if text(v) == "t" else "false"
    return lambda v: "'" + text(v).replace("'", "''") + "'"  # type: ignore[attr-defined]


class TestDecoding:
    """Writes test_decoding lines to ``write`` (one call per output row)."""

    __test__ = False  # not a pytest class

    def __init__(self, write: Callable[[str], None], types: Mapping[int, TypeInfo], *,
                 version: int, include_xids: bool = True, skip_empty_xacts: bool = True) -> None:
        self.write = write
        #: where the BEGIN line goes: ``write``, unless a parallel decode keys it apart (every
        #: worker that writes a change of a transaction writes its BEGIN, which is kept once)
        self.write_begin = write
        self.types = types
        self.include_xids = include_xids
        self.skip_empty_xacts = skip_empty_xacts
        #: PostgreSQL 17 (commit 26dd028) made a transactional message open the transaction
        #: (BEGIN) and count as a change; 15 and 16 print it bare and skip an otherwise
        #: empty transaction's BEGIN/COMMIT.
        self.messages_open_xact = version >= 17
        self.layouts = LayoutCache(types)
        self._plans: dict[RowLayout, list[_Step]] = {}
        self._wrote = False

    # -- transaction framing --------------------------------------------------------------

    def begin(self, txn: TxnInfo) -> None:
        self._wrote = False
        if not self.skip_empty_xacts:
            self._begin_line(txn)

    def _begin_line(self, txn: TxnInfo) -> None:
        self.write_begin(f"BEGIN {txn.xid}" if self.include_xids else "BEGIN")

    def _touch(self, txn: TxnInfo) -> None:
        if self.skip_empty_xacts and not self._wrote:
            self._begin_line(txn)
        self._wrote = True

    def commit(self, txn: TxnInfo) -> None:
        if self.skip_empty_xacts and not self._wrote:
            return
        self.write(f"COMMIT {txn.xid}" if self.include_xids else "COMMIT")

    # -- changes --------------------------------------------------------------------------

    def change(self, txn: TxnInfo, rel: RelationVersion, action: int, change: Change,
               toast: Mapping[int, list[bytes]]) -> None:
        self._touch(txn)
        layout = self.layouts.get(rel)
        head = f"table {rel.qualified}:"
        if action == INSERT:
            body = " INSERT:" + (" (no-tuple-data)" if change.new is None else
                                 self._tuple(layout, change.new, False, toast, change.lsn))
        elif action == DELETE:
            body = " DELETE:" + (" (no-tuple-data)" if change.old is None else
                                 self._tuple(layout, change.old, True, {}, change.lsn))
        else:
            body = " UPDATE:"
            if change.old is not None:
                body += (" old-key:" + self._tuple(layout, change.old, True, {}, change.lsn)
                         + " new-tuple:")
            body += (" (no-tuple-data)" if change.new is None else
                     self._tuple(layout, change.new, False, toast, change.lsn))
        self.write(head + body)

    def _tuple(self, layout: RowLayout, tup: WalTuple, skip_nulls: bool,
               toast: Mapping[int, list[bytes]], lsn: int) -> str:
        datums = layout.datums(tup, lsn)
        parts = []
        try:
            for index, prefix, fmt, varlena, lc in self._plan(layout):
                value = datums[index]
                if value is None:
                    if not skip_nulls:
                        parts.append(prefix + "null")
                elif type(value) is MissingValue:
                    parts.append(prefix + literal(lc.column.type_oid, value.text))
                elif varlena:
                    value = column_payload(lc, value, toast)
                    if value is UNCHANGED_TOAST:
                        parts.append(prefix + "unchanged-toast-datum")
                    else:
                        parts.append(prefix + fmt(value))
                else:
                    parts.append(prefix + fmt(value))
        except FORMAT_ERRORS:
            lc.codec.text(value)  # raises the codec's TupleDecodeError naming type and column
            raise
        return "".join(parts)

    def _plan(self, layout: RowLayout) -> list[_Step]:
        """Per relation version, once: where each live column is, its ``name[type]:``
        prefix and one function from its bytes straight to the quoted literal."""
        p = self._plans.get(layout)
        if p is None:
            p = self._plans[layout] = [
                (lc.index, f" {lc.column.quoted}[{lc.codec.type_name}]:",
                 _literal_fn(lc.column.type_oid, getattr(lc.codec.text, "__wrapped__",
                                                         lc.codec.text)),
                 lc.codec.typisvarlena, lc)
                for lc in layout.live]
        return p

    def rewrite(self, txn: TxnInfo, rel: RelationVersion, change: Change,
                toast: Mapping[int, list[bytes]], first: bool) -> None:
        """Rows of a table rewrite are no change: test_decoding never sees them."""

    def truncate(self, txn: TxnInfo, rels: list[RelationVersion], change: Change) -> None:
        self._touch(txn)
        t = change.payload
        assert isinstance(t, Truncate)
        flags = ""
        if t.restart_seqs:
            flags += " restart_seqs"
        if t.cascade:
            flags += " cascade"
        names = ", ".join(r.qualified for r in rels)
        self.write(f"table {names}: TRUNCATE:{flags or ' (no-flags)'}")

    def message(self, txn: TxnInfo | None, lsn: int, transactional: bool, prefix: str,
                content: bytes) -> None:
        if transactional and txn is not None and self.messages_open_xact:
            self._touch(txn)
        text = content.decode("utf-8", errors="surrogateescape")
        self.write(f"message: transactional: {int(transactional)} prefix: {prefix}, "
                   f"sz: {len(content)} content:{text}")


TestDecoding._tuple = native.twin(  # type: ignore[method-assign]
    TestDecoding._tuple, "cdclake.decoding.plugins._test_decoding")
TestDecoding.change = native.twin(  # type: ignore[method-assign]
    TestDecoding.change, "cdclake.decoding.plugins._test_decoding")
TestDecoding.begin = native.twin(  # type: ignore[method-assign]
    TestDecoding.begin, "cdclake.decoding.plugins._test_decoding")
TestDecoding.commit = native.twin(  # type: ignore[method-assign]
    TestDecoding.commit, "cdclake.decoding.plugins._test_decoding")
