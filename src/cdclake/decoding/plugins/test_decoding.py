"""The ``test_decoding`` output plugin: PostgreSQL's contrib/test_decoding text, line for line.

With the options cdclake's oracle uses (include-xids on, skip-empty-xacts on): ``BEGIN <xid>``
is written lazily before a transaction's first output line and ``COMMIT <xid>`` only if
something was written (what counts depends on the server version, see messages_open_xact);
rows print as ``table <schema>.<name>: INSERT: col[type]:value ...``
with test_decoding's literal rules (numbers bare, bool true/false, bit strings ``B'..'``,
everything else single-quoted with quotes doubled), ``old-key:``/``new-tuple:`` for updates that
logged an old identity, ``(no-tuple-data)`` and ``unchanged-toast-datum``.

The line and the transaction's framing run once per change (a workload of small transactions
frames as often as it changes), so they are written once and compiled as themselves (Cython's
pure-Python mode, ``_test_decoding.pxd``): :func:`begin`, :func:`commit`, :func:`change` are
:class:`TestDecoding`'s methods in both builds (``cdclake.native``). Compiled, a column's
plan also says whether ``_inline.pxd`` formats its well-formed datums in C (int2/4/8, UTF-8
text, bool, uuid, bytea, float8: the commonest values, no call into the codec); anything
else, and every datum in Python, goes to the codec, which says what is wrong with a bad one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cdclake import native
from cdclake.catalog.model import RelationVersion, TypeInfo
from cdclake.decoding.changes import DELETE, INSERT, Change, Truncate, TxnInfo
from cdclake.decoding.rows import UNCHANGED_TOAST, LayoutCache, RowLayout, column_payload
from cdclake.tuples.codecs import FORMAT_ERRORS
from cdclake.tuples.desc import MissingValue

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding.plugins._inline import inline_kind, inline_text
    from cython.cimports.cdclake.tuples._bytes import plain_payload
else:
    def inline_kind(text: object) -> int:
        """Python formats every datum with its codec."""
        return 0

    def inline_text(kind: int, value: object) -> str | None:
        return None

    def plain_payload(value: object) -> object:
        return None

# pg_type oids whose output test_decoding prints without quotes
_BARE = frozenset({21, 23, 20, 26, 700, 701, 1700})  # int2 int4 int8 oid float4 float8 numeric
_BIT = frozenset({1560, 1562})  # bit varbit
_BOOL = 16

# print_literal()'s styles
BARE, BIT, BOOL, QUOTED = 0, 1, 2, 3


def style_of(type_oid: int) -> int:
    return BARE if type_oid in _BARE else BIT if type_oid in _BIT else \
        BOOL if type_oid == _BOOL else QUOTED


def put_literal(out: list[str], style: int, text: str) -> None:
    """print_literal(): append ``text`` as test_decoding quotes a value of ``style``, in
    pieces joined once per line (a text without a quote is not copied)."""
    if style == BARE:
        out.append(text)
    elif style == QUOTED:
        out.append("'")
        out.append(text.replace("'", "''") if "'" in text else text)
        out.append("'")
    elif style == BIT:
        out.append("B'")
        out.append(text)
        out.append("'")
    else:
        out.append("true" if text == "t" else "false")


def literal(type_oid: int, text: str) -> str:
    """print_literal(): how test_decoding quotes a value's text output."""
    out: list[str] = []
    put_literal(out, style_of(type_oid), text)
    return "".join(out)


class Step:
    """A live column's plan, made once per relation version: where it is in the deformed
    tuple, its ``name[type]:`` prefix, its codec's text function, its literal style, whether
    it is a varlena, what ``_inline.pxd`` formats of it (0: nothing) and the LiveColumn."""

    __slots__ = ("column", "index", "kind", "prefix", "style", "text", "varlena")

    def __init__(self, lc: Any) -> None:
        self.index = lc.index
        self.prefix = f" {lc.column.quoted}[{lc.codec.type_name}]:"
        self.text = getattr(lc.codec.text, "__wrapped__", lc.codec.text)
        self.style = style_of(lc.column.type_oid)
        self.varlena = lc.codec.typisvarlena
        self.kind = inline_kind(self.text)
        self.column = lc


class Plan:
    """What a relation version's line costs, worked out once: its layout (the codecs) and a
    step per live column."""

    __slots__ = ("layout", "rel", "steps")

    def __init__(self, rel: RelationVersion, layout: RowLayout) -> None:
        self.rel = rel
        self.layout = layout
        self.steps = [Step(lc) for lc in layout.live]


def plan(self: TestDecoding, rel: RelationVersion) -> Plan:
    """``rel``'s plan, kept by the version's identity (a runaway number of versions empties
    the cache; the version is kept with it, so its id is not another's)."""
    p = self._plans.get(id(rel))
    if p is None or p.rel is not rel:
        if len(self._plans) > 4096:
            self._plans.clear()
        p = self._plans[id(rel)] = Plan(rel, self.layouts.get(rel))
    return p


def put_tuple(out: list[str], p: Plan, tup: Any, skip_nulls: bool,
              toast: Mapping[int, list[bytes]], lsn: int) -> None:
    """Append the pieces of ``tup``'s columns to ``out``."""
    datums = p.layout.datums(tup, lsn)
    value: object = None
    step: Any = None
    try:
        for step in p.steps:
            value = datums[step.index]
            if value is None:
                if not skip_nulls:
                    out.append(step.prefix)
                    out.append("null")
                continue
            out.append(step.prefix)
            if type(value) is MissingValue:
                out.append(literal(step.column.column.type_oid,
                                   value.text))  # type: ignore[attr-defined]
                continue
            if step.varlena:
                plain = plain_payload(value)
                value = column_payload(step.column, value, toast) if plain is None else plain
                if value is UNCHANGED_TOAST:
                    out.append("unchanged-toast-datum")
                    continue
            s = inline_text(step.kind, value) if step.kind else None
            put_literal(out, step.style, step.text(value) if s is None else s)
    except FORMAT_ERRORS:
        step.column.codec.text(value)  # raises the codec's error naming type and column
        raise


def begin_line(self: TestDecoding, txn: TxnInfo) -> None:
    self.write_begin(f"BEGIN {txn.xid}" if self.include_xids else "BEGIN")


def touch(self: TestDecoding, txn: TxnInfo) -> None:
    """The transaction has output: its BEGIN first, if that was put off."""
    if self.skip_empty_xacts and not self._wrote:
        begin_line(self, txn)
    self._wrote = True


def begin(self: TestDecoding, txn: TxnInfo) -> None:
    self._wrote = False
    if not self.skip_empty_xacts:
        begin_line(self, txn)


def commit(self: TestDecoding, txn: TxnInfo) -> None:
    if self.skip_empty_xacts and not self._wrote:
        return
    self.write(f"COMMIT {txn.xid}" if self.include_xids else "COMMIT")


def change(self: TestDecoding, txn: TxnInfo, rel: RelationVersion, action: int,
           chg: Change, toast: Mapping[int, list[bytes]]) -> None:
    touch(self, txn)
    p = plan(self, rel)
    line = ["table ", rel.qualified, ":"]
    if action == INSERT:
        line.append(" INSERT:")
        if chg.new is None:
            line.append(" (no-tuple-data)")
        else:
            put_tuple(line, p, chg.new, False, toast, chg.lsn)
    elif action == DELETE:
        line.append(" DELETE:")
        if chg.old is None:
            line.append(" (no-tuple-data)")
        else:
            put_tuple(line, p, chg.old, True, {}, chg.lsn)
    else:
        line.append(" UPDATE:")
        if chg.old is not None:
            line.append(" old-key:")
            put_tuple(line, p, chg.old, True, {}, chg.lsn)
            line.append(" new-tuple:")
        if chg.new is None:
            line.append(" (no-tuple-data)")
        else:
            put_tuple(line, p, chg.new, False, toast, chg.lsn)
    self.write("".join(line))


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
        self._plans: dict[int, Plan] = {}
        self._wrote = False

    # the module's functions (compiled, where built: bound below)
    begin = begin
    commit = commit
    change = change

    def rewrite(self, txn: TxnInfo, rel: RelationVersion, change: Change,
                toast: Mapping[int, list[bytes]], first: bool) -> None:
        """Rows of a table rewrite are no change: test_decoding never sees them."""

    def truncate(self, txn: TxnInfo, rels: list[RelationVersion], change: Change) -> None:
        touch(self, txn)
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
            touch(self, txn)
        text = content.decode("utf-8", errors="surrogateescape")
        self.write(f"message: transactional: {int(transactional)} prefix: {prefix}, "
                   f"sz: {len(content)} content:{text}")


if not cython.compiled:  # the compiled copy of this module binds nothing
    for _method in (begin, commit, change):
        native.bind(TestDecoding, _method.__name__, _method,
                    "cdclake.decoding.plugins._test_decoding")
