# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``Replayer.replay`` (:mod:`cdclake.decoding.reassembly`, see
:mod:`cdclake.native`): one committed transaction's changes to output-plugin calls.

The same loop as the Python reference, which tests run beside it, with the relation of a
change found without a call where it is the common case: the dictionary's newest version
applies at the change's LSN (``catalog/_dictionary.pxd``), and it is not a transient heap,
whose gates ``Replayer._wanted`` has already decided. Any other change (a relation created in
this transaction, a rewrite, a first sight) goes through ``Replayer.resolve``, with its
errors.
"""

import sys

from cpython.long cimport PyLong_FromVoidPtr

from cdclake.catalog._dictionary cimport newest_version
from cdclake.decoding._stripes cimport ShareSlots, says_yes, share_slots

from cdclake.catalog.dictionary import Dictionary
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
)
from cdclake.decoding.stripes import Shares
from cdclake.errors import DecodingError
from cdclake.lsn import format_lsn

cdef ShareSlots SHARE = share_slots(Shares)

cdef int _INSERT = INSERT
cdef int _DELETE = DELETE
cdef int _ELSEWHERE = ELSEWHERE
cdef int _MESSAGE = MESSAGE
cdef int _SPEC_ABORT = SPEC_ABORT
cdef int _SPEC_CONFIRM = SPEC_CONFIRM
cdef int _SPEC_INSERT = SPEC_INSERT
cdef int _TOAST_CHUNK = TOAST_CHUNK
cdef int _TRUNCATE = TRUNCATE


def replay(self, info, changes):
    """See ``Replayer.replay``."""
    append_chunk = sys.modules["cdclake.decoding.reassembly"]._append_chunk
    plugin = self.plugin
    change = plugin.change
    dictionary = self.dictionary
    for_locator = dictionary.relation_for_locator
    by_loc = dictionary.by_loc if type(dictionary) is Dictionary else None
    cdef dict kept = self._kept
    plugin.begin(info)
    cdef dict toast = {}
    cdef dict last_seq = {}
    cdef dict rewritten = {}
    cdef int action
    cdef bint emit = True
    share = self.share
    spec = None
    for ch in changes:
        action = ch.action
        if share is not None:
            if action == _ELSEWHERE:
                emit = False
                action = _INSERT  # resolved for its TOAST release only
            elif action <= _MESSAGE or action == _SPEC_CONFIRM:
                emit = says_yes(share, Shares, &SHARE, info.xid, ch.lsn)
        if action == _SPEC_CONFIRM:
            if spec is None:
                raise DecodingError(
                    f"invalid ordering of speculative insertion changes in transaction "
                    f"{info.xid} at {format_lsn(ch.lsn)}")
            ch = spec
            action = _INSERT
        if action <= _DELETE:
            loc = ch.locator
            rel = None if by_loc is None else newest_version(by_loc, loc.spc, loc.rel, ch.lsn)
            if rel is None:
                rel = for_locator(loc.spc, loc.rel, ch.lsn)
            known = (kept.get(PyLong_FromVoidPtr(<void *> rel))
                     if rel is not None and not rel.rewrite_of else None)
            if known is not None and (<tuple> known)[0] is rel:
                if not (<tuple> known)[1]:
                    rel = None
            else:
                rel = self.resolve(ch, info)
            if rel is not None:
                if not emit:
                    pass
                elif rel.rewrite_of:
                    self._rewrite_row(info, rel, action, ch, toast, rewritten)
                else:
                    change(info, rel, action, ch, toast)
                if ch.clear_toast and toast:
                    toast.clear()
                    last_seq.clear()
            spec = None
        elif action == _TOAST_CHUNK:
            append_chunk(toast, last_seq, ch.payload, info, ch.lsn)
            spec = None
        elif action == _SPEC_INSERT:
            spec = ch
        elif action == _SPEC_ABORT:
            if spec is not None:
                toast.clear()
                last_seq.clear()
                spec = None
        elif not emit:
            pass
        elif action == _TRUNCATE:
            rels = [r for r in (self._truncated(oid, ch.lsn) for oid in ch.payload.relids)
                    if r is not None]
            if rels:  # as PostgreSQL: no callback when no relation is left
                plugin.truncate(info, rels, ch)
        elif action == _MESSAGE:
            m = ch.payload
            plugin.message(info, ch.lsn, True, m.prefix, m.content)
    plugin.commit(info)
