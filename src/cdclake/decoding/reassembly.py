"""Commit processing: reassemble a committed transaction and hand it to the plugin.

Runs over the LSN-ordered merge of the transaction and its committed subtransactions, as
PostgreSQL's ReorderBufferProcessTXN does: each change's relfilenode is mapped to the relation
version valid at its LSN (the dictionary stands in for the historic catalog snapshot); TOAST
chunks are collected per value id until the row that points to them arrives; a speculative
insert waits for its confirmation (INSERT ... ON CONFLICT) and is dropped on abort; changes to
catalogs, TOAST tables and sequences are skipped.

Rows written into a user table's transient heap are where PostgreSQL differs from what a lake
needs. ALTER TABLE rewrites (a column type change, ADD COLUMN with a volatile default, a new
serial key) and REFRESH MATERIALIZED VIEW fill a transient heap with ordinary, logically logged
inserts whose values were never logged as changes of the table itself; PostgreSQL's plugins
never see them (``relrewrite``). Here they go to the plugin's ``rewrite`` callback: the table's
whole content as of that point, which a mirror must take to stay equal to its source.
VACUUM FULL and CLUSTER copy pages without logging rows: they reach no callback, and change no
value either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol

from cdclake import native
from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.model import RELKIND_PARTITIONED, RELKIND_TOAST, RelationVersion
from cdclake.catalog.signing import DDL_PREFIX, ForgedMessage, open_signed, stale_epoch
from cdclake.decoding.changes import (
    DELETE,
    ELSEWHERE,
    INSERT,
    MESSAGE,
    SPEC_ABORT,
    SPEC_CONFIRM,
    SPEC_INSERT,
    TOAST_CHUNK,
    TRUNCATE,
    Change,
    Message,
    ToastChunk,
    Truncate,
    TxnInfo,
)
from cdclake.decoding.filter import Filter
from cdclake.errors import DecodingError, UnknownRelationError
from cdclake.lsn import format_lsn
from cdclake.wal.record import RelFileLocator

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.catalog._versions import newest_version
    from cython.cimports.cdclake.decoding._stripes import says_yes
else:
    from cdclake.catalog.versions import newest_version
    from cdclake.decoding.stripes import says_yes

log = logging.getLogger(__name__)

#: value id -> chunk payloads in sequence order
ToastMap = dict[int, list[bytes]]


class OutputPlugin(Protocol):
    """The output plugin callbacks (begin, change, truncate, message, commit)."""

    def begin(self, txn: TxnInfo) -> None: ...

    def change(self, txn: TxnInfo, rel: RelationVersion, action: int, change: Change,
               toast: ToastMap) -> None: ...

    def truncate(self, txn: TxnInfo, rels: list[RelationVersion], change: Change) -> None: ...

    def message(self, txn: TxnInfo | None, lsn: int, transactional: bool, prefix: str,
                content: bytes) -> None: ...

    def commit(self, txn: TxnInfo) -> None: ...

    def rewrite(self, txn: TxnInfo, rel: RelationVersion, change: Change, toast: ToastMap,
                first: bool) -> None:
        """A row of table ``rel`` as a rewrite left it; ``first``: the rewrite's first row
        (the table's rows so far are replaced by this rewrite's). Plugins that print only
        changes (test_decoding) ignore it, as PostgreSQL's do."""


class CatalogEvent(Protocol):
    """Something learnt from catalog rows in the WAL, applied when its transaction commits:
    where it is among the transaction's messages (``in_order``), or after all of them."""

    in_order: ClassVar[bool]

    def apply(self, dictionary: Dictionary, lsn: int, info: TxnInfo) -> None: ...


class Replayer:
    """Turns committed transactions into output-plugin calls."""

    def __init__(self, dictionary: Dictionary, plugin: OutputPlugin,
                 filter: Filter | None = None, ddl_key: bytes | None = None,
                 warn_forged: bool = True) -> None:
        self.dictionary = dictionary
        #: whether to log the forged messages it ignores: of several decoders sharing a WAL
        #: (each applies every catalog event), one does
        self.warn_forged = warn_forged
        #: authenticates ``cdclake.ddl`` messages (:mod:`cdclake.catalog.signing`)
        self.ddl_key = ddl_key
        #: LSNs of the forged ``cdclake.ddl`` messages ignored so far
        self.forged: list[int] = []
        self.plugin = plugin
        #: gate 3 for relations the decode-time gate could not know yet (created, or rewritten
        #: into a transient heap, by the committing transaction)
        self.filter = filter
        #: (commit LSN, LSNs of its DDL messages) of the transaction being committed
        self._own_ddl: tuple[int, frozenset[int]] = (0, frozenset())
        #: :func:`wanted`'s answers by relation version (id, and the version, kept alive)
        self._kept: dict[int, tuple[RelationVersion, bool]] = {}
        #: which changes this replayer emits, by top-level xid and LSN (None: all): the
        #: decoder's ``share`` in a parallel decode, asked here of the changes every worker
        #: buffers (a confirmed speculative insert, TRUNCATE, a message) and of the others,
        #: which the decoder already chose (the call tells the caller where a change is)
        self.share: Callable[[int, int], bool] | None = None

    # -- dictionary ------------------------------------------------------------------------

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None:
        """Apply a committed transaction's DDL messages and catalog events (in LSN order).

        Messages, and the events that are ``in_order`` (a pg_class row's UPDATE), in their
        order; the others after all of them: a pg_class insert of a table rewrite carries
        the relation's definition as of the commit over to the new relfilenode, and that
        definition includes what the transaction's own DDL messages say (ALTER TABLE ... ADD
        COLUMN rewrites the table before its event trigger describes it).
        """
        messages = {lsn: body for lsn, event in events if isinstance(event, bytes)
                    for body in self._authentic(lsn, event, info)}
        self._own_ddl = (info.final_lsn, frozenset(messages))
        later = []
        for lsn, event in events:
            if isinstance(event, bytes):
                if lsn in messages:
                    self.dictionary.apply_message(lsn, messages[lsn], info.final_lsn)
            elif event.in_order:  # type: ignore[attr-defined]
                event.apply(self.dictionary, lsn, info)  # type: ignore[attr-defined]
            else:
                later.append((lsn, event))
        for lsn, event in later:
            event.apply(self.dictionary, lsn, info)  # type: ignore[attr-defined]

    def _authentic(self, lsn: int, content: bytes, info: TxnInfo) -> tuple[bytes, ...]:
        """The body of a message cdclake's triggers wrote in this transaction, or nothing: a
        forged one is ignored with a warning naming its LSN, and the dictionary is as if it
        had never been written (which is what PostgreSQL's catalog says)."""
        if self.ddl_key is None:
            raise DecodingError(
                f"cdclake.ddl message at {format_lsn(lsn)} cannot be authenticated: no ddl key "
                "is configured; give the key file `cdclake source install` wrote "
                "(CDCLAKE_DDL_KEY_FILE) or a DSN of a superuser, who may read it")
        try:
            xid8, body = open_signed(self.ddl_key, content, info.xid)
            if stale_epoch(xid8, self.dictionary.ddl_xid8):
                raise ForgedMessage(f"its transaction {xid8} is a wraparound older than "
                                    f"{self.dictionary.ddl_xid8}")
        except ForgedMessage as exc:
            if self.warn_forged:
                log.warning("ignoring a forged cdclake.ddl message at %s (transaction %d): %s",
                            format_lsn(lsn), info.xid, exc)
            self.forged.append(lsn)
            return ()
        self.dictionary.ddl_xid8 = max(self.dictionary.ddl_xid8, xid8)
        return (body,)

    # -- non-transactional messages --------------------------------------------------------

    def message(self, lsn: int, prefix: str, content: bytes) -> None:
        if prefix == DDL_PREFIX:  # cdclake writes its own inside the DDL's transaction only
            log.warning("ignoring a forged cdclake.ddl message ending at %s: it is not "
                        "transactional", format_lsn(lsn))
            self.forged.append(lsn)
        self.plugin.message(None, lsn, False, prefix, content)

    # -- one transaction -------------------------------------------------------------------

    def replay(self, info: TxnInfo, changes: Iterable[Change]) -> None:
        """Hand the committed transaction ``info`` (its ``changes`` in LSN order) to the
        plugin: :func:`replay`."""
        replay(self, info, changes)

    def resolve(self, ch: Change, info: TxnInfo) -> RelationVersion | None:
        """The relation version a change applies to, or None if it is not to be decoded."""
        loc = ch.locator
        assert loc is not None
        d = self.dictionary
        v = d.relation_for_locator(loc.spc, loc.rel, ch.lsn)
        if v is None:
            if d.is_catalog(loc.spc, loc.rel, ch.lsn):
                return None  # not logically logged: PostgreSQL skips catalog changes too
            # Created and filled in this transaction (CREATE TABLE AS, SELECT INTO): the rows
            # precede the event trigger's message that defines the relation.
            v = d.first_version_after(loc.spc, loc.rel, ch.lsn)
            if v is None or v.valid_from > info.final_lsn:
                if ch.old is None and ch.new is None and loc.rel < 16384:
                    return None  # a catalog row without data, as PostgreSQL skips it
                raise UnknownRelationError(loc, ch.lsn)
        if v.dropped:
            raise UnknownRelationError(loc, ch.lsn, "the relation was dropped before this LSN")
        if v.rewrite_of:
            return v
        return v if self._wanted(v) else None

    def _wanted(self, v: RelationVersion) -> bool:
        """Gates 4 and 3 for ``v``: :func:`wanted`."""
        return wanted(self._kept, self.filter, v)

    def _rewrite_row(self, info: TxnInfo, heap: RelationVersion, action: int, ch: Change,
                     toast: ToastMap,
                     rewritten: dict[RelFileLocator, RelationVersion | None]) -> None:
        """An insert into the transient heap ``heap``: a row of the table it rewrites
        (``rewritten``: the table definition of each transient heap seen so far)."""
        loc = ch.locator
        assert loc is not None
        first = loc not in rewritten
        if first:
            final, own = self._own_ddl
            table = self.dictionary.rewrite_layout(
                heap.rewrite_of, ch.lsn, own if final == info.final_lsn else ())
            wanted = table is not None and self._wanted(table)
            rewritten[loc] = table if wanted else None
        table = rewritten[loc]
        if table is not None and action == INSERT:
            self.plugin.rewrite(info, table, ch, toast, first)

    def _truncate(self, info: TxnInfo, ch: Change) -> None:
        """A TRUNCATE: the plugin hears of the relations it names that it is to hear of."""
        t = ch.payload
        assert isinstance(t, Truncate)
        rels = [r for r in (self._truncated(oid, ch.lsn) for oid in t.relids) if r is not None]
        if rels:  # as PostgreSQL: no callback when no relation is left
            self.plugin.truncate(info, rels, ch)

    def _truncated(self, oid: int, lsn: int) -> RelationVersion | None:
        """A relation a TRUNCATE record names, if the plugin is to hear of it: a partitioned
        table too (the record names it beside its partitions, and so does a slot), though it
        has no rows of its own."""
        v = self.dictionary.relation_for_oid(oid, lsn)
        if v is None or v.dropped:
            raise UnknownRelationError(f"oid {oid}", lsn, "named by a TRUNCATE record")
        if v.relkind == RELKIND_PARTITIONED:
            return v if self.filter is None or self.filter.keeps_table(v.schema, v.name) else None
        return v if v.relkind != RELKIND_TOAST and self._wanted(v) else None


def _append_chunk(toast: ToastMap, last_seq: dict[int, int], chunk: ToastChunk, info: TxnInfo,
                  lsn: int) -> None:
    vid = chunk.value_id
    expected = last_seq.get(vid, -1) + 1
    if chunk.seq != expected:
        raise DecodingError(
            f"TOAST chunk {chunk.seq} of value {vid} arrived where chunk {expected} was expected "
            f"(transaction {info.xid}, {format_lsn(lsn)})")
    last_seq[vid] = chunk.seq
    if expected == 0:
        toast[vid] = [chunk.data]
    else:
        toast[vid].append(chunk.data)


def wanted(memo: dict[int, tuple[RelationVersion, bool]], filt: Filter | None,
           v: RelationVersion) -> bool:
    """Gates 4 and 3 (a user table, one ``filt`` keeps) for relation version ``v``, decided
    once per version (``memo``: a Replayer's ``_kept``): this runs for every change."""
    known = memo.get(id(v))
    if known is None or known[0] is not v:
        keep = v.is_user_table and (filt is None or filt.keeps_table(v.schema, v.name))
        known = memo[id(v)] = (v, keep)
    return known[1]


def replay(replayer: Replayer, info: TxnInfo, changes: Iterable[Change]) -> None:
    """``Replayer.replay``: one committed transaction's changes to output-plugin calls.

    A function of the module, not a method, so that ``_reassembly.pxd`` can give its locals
    C types where this file is compiled (as ``cdclake.decoding._reassembly``; Cython's pure-
    Python mode). The relation of a change is found without a method call where it is the
    common case, the dictionary's newest version applies at the change's LSN
    (:func:`~cdclake.catalog.versions.newest_version`); any other change (a relation created
    in this transaction, a rewrite) goes through ``Replayer.resolve``, with its errors.
    """
    plugin = replayer.plugin
    change = plugin.change
    dictionary = replayer.dictionary
    by_loc = dictionary.by_loc if type(dictionary) is Dictionary else None
    share = replayer.share
    kept, filt = replayer._kept, replayer.filter
    plugin.begin(info)
    toast: ToastMap = {}
    last_seq: dict[int, int] = {}
    rewritten: dict[RelFileLocator, RelationVersion | None] = {}
    spec: Change | None = None
    emit = True
    for ch in changes:
        action = ch.action
        if share is not None:
            if action == ELSEWHERE:
                emit = False
                action = INSERT  # resolved for its TOAST release only
            elif action <= MESSAGE or action == SPEC_CONFIRM:
                emit = says_yes(share, info.xid, ch.lsn)
        if action == SPEC_CONFIRM:
            if spec is None:
                raise DecodingError(
                    f"invalid ordering of speculative insertion changes in transaction "
                    f"{info.xid} at {format_lsn(ch.lsn)}")
            ch = spec
            action = INSERT
        if action <= DELETE:
            loc = ch.locator
            assert loc is not None
            rel = None if by_loc is None else newest_version(by_loc, loc.spc, loc.rel, ch.lsn)
            if rel is not None and not rel.rewrite_of:
                if not wanted(kept, filt, rel):
                    rel = None
            else:
                rel = replayer.resolve(ch, info)
            if rel is not None:
                if not emit:
                    pass
                elif rel.rewrite_of:
                    replayer._rewrite_row(info, rel, action, ch, toast, rewritten)
                else:
                    change(info, rel, action, ch, toast)
                if ch.clear_toast and toast:
                    toast.clear()
                    last_seq.clear()
            spec = None
        elif action == TOAST_CHUNK:
            chunk = ch.payload
            assert isinstance(chunk, ToastChunk)
            _append_chunk(toast, last_seq, chunk, info, ch.lsn)
            spec = None
        elif action == SPEC_INSERT:
            spec = ch
        elif action == SPEC_ABORT:
            if spec is not None:
                toast.clear()
                last_seq.clear()
                spec = None
        elif not emit:
            pass
        elif action == TRUNCATE:
            replayer._truncate(info, ch)
        elif action == MESSAGE:
            m = ch.payload
            assert isinstance(m, Message)
            plugin.message(info, ch.lsn, True, m.prefix, m.content)
    plugin.commit(info)


Replayer.replay = native.twin(  # type: ignore[method-assign]
    Replayer.replay, "cdclake.decoding._reassembly")
