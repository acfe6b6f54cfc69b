# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of :func:`cdclake.waldump.describe` and
:func:`cdclake.waldump.record_json_line` (see :mod:`cdclake.native`).

Why: ``cdclake waldump --json`` spent four fifths of its time formatting, a dozen Python
calls per record. Here a line is written with ``snprintf`` into one C buffer. The record type
comes from a cache of the rmgr table's names (``identify`` depends only on the rmgr, the info
byte and the server version). The descriptions of the records a WAL is mostly made of are
written here too: heap INSERT, UPDATE, HOT_UPDATE and DELETE, a plain COMMIT (no
subtransactions, relations, invalidations, two-phase or origin data), and every record whose
rmgr cdclake does not describe, or whose type it describes by name only.

The fields are read by the readers ``heap.parse`` and ``xact.parse`` read them with
(``wal/rmgr/heap.py``'s ``insert_fields``, ``delete_fields`` and ``update_fields``,
``xact.py``'s ``finish_fields``, compiled: ``cimport``). Everything else, and any record those
refuse, goes to the Python reference (``waldump._python_describe``), which returns its text
or raises its WalCorruptError: the text is the same either way, which the waldump tests check
record by record.
"""

import importlib
from json.encoder import encode_basestring_ascii as _json_str

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.string cimport strlen

from cdclake.decoding.rmgrs import identify, rmgr_name
from cdclake.errors import WalCorruptError
from cdclake.wal.record import FORK_NAMES, RM_HEAP2_ID, RM_HEAP_ID, RM_XACT_ID
from cdclake.wal.rmgr import heap, heap2, xact

from cdclake.tuples._out cimport Out, put
from cdclake.wal.rmgr._heap cimport delete_fields, insert_fields, update_fields
from cdclake.wal.rmgr._xact cimport finish_fields

cdef int HEAP_OPMASK = heap.XLOG_HEAP_OPMASK
cdef int HEAP_INSERT = heap.XLOG_HEAP_INSERT
cdef int HEAP_UPDATE = heap.XLOG_HEAP_UPDATE
cdef int HEAP_HOT_UPDATE = heap.XLOG_HEAP_HOT_UPDATE
cdef int HEAP_DELETE = heap.XLOG_HEAP_DELETE
cdef int HEAP_LOCK = heap.XLOG_HEAP_LOCK
cdef int HEAP2_OPMASK = heap2.XLOG_HEAP2_OPMASK
cdef int HEAP2_MULTI_INSERT = heap2.XLOG_HEAP2_MULTI_INSERT
cdef int HEAP2_NEW_CID = heap2.XLOG_HEAP2_NEW_CID
cdef int XACT_OPMASK = xact.XLOG_XACT_OPMASK
cdef int XACT_COMMIT = xact.XLOG_XACT_COMMIT
cdef unsigned int XINFO_HAS_DBINFO = xact.XACT_XINFO_HAS_DBINFO
cdef int C_HEAP = RM_HEAP_ID, C_HEAP2 = RM_HEAP2_ID, C_XACT = RM_XACT_ID

#: seconds from 1970-01-01 to 2000-01-01, PostgreSQL's epoch
cdef long long PG_EPOCH_UNIX = 946684800
#: the last µs of 9999-12-31 after PostgreSQL's epoch: four-digit years print plainly
cdef long long LAST_FOUR_DIGIT_YEAR_US = 252455615999999999

#: ``identify`` results (ASCII bytes) by (version, rmgr id, info byte)
cdef dict _kinds = {}
#: each rmgr's name as a JSON string (ASCII bytes), by id
cdef list _rmgr_json = [None] * 256
#: fork names as JSON strings (ASCII bytes)
cdef list _fork_json = []
#: the reference (``waldump._python_describe``), for what is not written here
cdef object _reference = None
#: the rmgrs the reference writes more than the record type for (the rest: the type alone)
cdef frozenset _described = frozenset()


cdef _bind_reference():
    """Read the reference module once it is loaded (it imports this one while loading)."""
    global _reference, _described
    waldump = importlib.import_module("cdclake.waldump")
    _described = frozenset(waldump._DESCRIBERS)
    _reference = waldump._python_describe


cdef bytes _kind(rec, int rmid, int info, int version):
    cdef long key = ((<long> version) << 16) | (rmid << 8) | info
    kind = _kinds.get(key)
    if kind is None:
        kind = _kinds[key] = identify(rec, version).encode("ascii")
    return kind


#: the one output buffer, reused by every call (the GIL is held throughout)
cdef Out _out = Out(NULL, 0, 0)


cdef inline int _lit(Out *o, const char *s) except -1:
    return put(o, s, strlen(s))


cdef inline int _bytes(Out *o, bytes b) except -1:
    return put(o, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b))


cdef int _dec(Out *o, unsigned long long v, int width=0) except -1:
    """``v`` in decimal, zero-padded to ``width`` digits."""
    cdef char tmp[24]
    cdef int i = 24
    while True:
        i -= 1
        tmp[i] = <char> (48 + v % 10)
        v //= 10
        if v == 0 and 24 - i >= width:
            break
    return put(o, tmp + i, 24 - i)


cdef int _hex(Out *o, unsigned long long v, int width=0) except -1:
    """``v`` in upper-case hex, zero-padded to ``width`` digits."""
    cdef char tmp[16]
    cdef int i = 16
    while True:
        i -= 1
        tmp[i] = b"0123456789ABCDEF"[v & 15]
        v >>= 4
        if v == 0 and 16 - i >= width:
            break
    return put(o, tmp + i, 16 - i)


cdef int _lsn(Out *o, unsigned long long lsn) except -1:
    _hex(o, lsn >> 32)
    _lit(o, "/")
    return _hex(o, lsn & 0xFFFFFFFF)


cdef int _timestamp(Out *o, long long us) except -1:
    """A TimestampTz in a four-digit year as ``_timestamp`` prints it (strftime's fields)."""
    cdef long long secs = us // 1000000 + PG_EPOCH_UNIX
    cdef long long days = secs // 86400, rem = secs % 86400
    # days since 1970-01-01 -> civil date (Howard Hinnant's civil_from_days)
    cdef long long z = days + 719468
    cdef long long era = z // 146097
    cdef long long doe = z - era * 146097
    cdef long long yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef long long y = yoe + era * 400
    cdef long long doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef long long mp = (5 * doy + 2) // 153
    cdef long long d = doy - (153 * mp + 2) // 5 + 1
    cdef long long m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    _dec(o, y, 4)
    _lit(o, "-")
    _dec(o, m, 2)
    _lit(o, "-")
    _dec(o, d, 2)
    _lit(o, " ")
    _dec(o, rem // 3600, 2)
    _lit(o, ":")
    _dec(o, rem % 3600 // 60, 2)
    _lit(o, ":")
    _dec(o, rem % 60, 2)
    _lit(o, ".")
    _dec(o, us % 1000000, 6)
    return _lit(o, " UTC")


cdef bint _heap_desc(Out *o, rec, int op) except -1:
    """The description of a heap INSERT/UPDATE/HOT_UPDATE/DELETE after its type, or False
    when ``heap.parse`` would refuse the record (its fields are read by the same readers)."""
    cdef unsigned int off, flags, xmax, bits, new_xmax, new_off, _prefix, _suffix
    cdef Py_ssize_t _at
    blocks = rec.blocks
    if not blocks:
        return False
    main = rec.main_data
    try:
        if op == HEAP_INSERT:
            off, flags = insert_fields(rec, main, blocks[0].data)
            _lit(o, " off: ")
            _dec(o, off)
            _lit(o, ", flags: 0x")
            _hex(o, flags, 2)
            return True
        if op == HEAP_DELETE:
            xmax, off, bits, flags = delete_fields(rec, main)
            _lit(o, " xmax: ")
            _dec(o, xmax)
            _lit(o, ", off: ")
            _dec(o, off)
            _lit(o, ", infobits: 0x")
            _hex(o, bits, 2)
            _lit(o, ", flags: 0x")
            _hex(o, flags, 2)
            return True
        xmax, off, bits, flags, new_xmax, new_off, _prefix, _suffix, _at = update_fields(
            rec, op, main, blocks[0].data)
    except WalCorruptError:  # the reference raises it
        return False
    _lit(o, " old_xmax: ")
    _dec(o, xmax)
    _lit(o, ", old_off: ")
    _dec(o, off)
    _lit(o, ", old_infobits: 0x")
    _hex(o, bits, 2)
    _lit(o, ", flags: 0x")
    _hex(o, flags, 2)
    _lit(o, ", new_xmax: ")
    _dec(o, new_xmax)
    _lit(o, ", new_off: ")
    _dec(o, new_off)
    return True


cdef bint _commit_desc(Out *o, rec, int version) except -1:
    """A plain COMMIT's description (its time), or False for any other commit (no
    subtransactions, relations, invalidations, two-phase or origin data), and for one
    ``xact.parse`` would refuse (its fields are read by the same walk)."""
    cdef long long us
    try:
        fields = finish_fields(rec.info, XACT_COMMIT, rec.main_data, version)
    except (IndexError, ValueError):  # the reference raises its WalCorruptError
        return False
    if fields[1] & ~XINFO_HAS_DBINFO:
        return False
    us = fields[0]
    if us < 0 or us > LAST_FOUR_DIGIT_YEAR_US:
        return False
    _lit(o, " ")
    _timestamp(o, us)
    return True


cdef object _describe(Out *o, rec, int version):
    """``describe(rec, version)`` appended to ``o`` (then None), or, for a record not written
    here, the reference's text, with ``o`` as it was."""
    cdef int rmid = rec.rmid, info = rec.info, op
    cdef Py_ssize_t mark = o.n
    if _reference is None:
        _bind_reference()
    _bytes(o, _kind(rec, rmid, info, version))
    if rmid not in _described:
        return None
    if rmid == C_HEAP:
        op = info & HEAP_OPMASK
        if (op == HEAP_INSERT or op == HEAP_UPDATE or op == HEAP_HOT_UPDATE
                or op == HEAP_DELETE):
            if _heap_desc(o, rec, op):
                return None
        elif op == HEAP_LOCK:  # parsed as nothing: the type alone
            return None
    elif rmid == C_HEAP2:
        op = info & HEAP2_OPMASK
        if op != HEAP2_MULTI_INSERT and op != HEAP2_NEW_CID:  # parsed as nothing
            return None
    elif rmid == C_XACT and info & XACT_OPMASK == XACT_COMMIT:
        if _commit_desc(o, rec, version):
            return None
    o.n = mark
    return _reference(rec, version)


cdef str _text(Out *o):
    return PyUnicode_DecodeASCII(o.p, o.n, NULL)


def describe(rec, version):
    """See :func:`cdclake.waldump.describe`."""
    _out.n = 0
    text = _describe(&_out, rec, version)
    return _text(&_out) if text is None else text


def record_json_line(rec, version):
    """See :func:`cdclake.waldump.record_json_line`."""
    cdef Out *o = &_out
    cdef int rmid = rec.rmid, fork, first = 1
    cdef Py_ssize_t images = 0, mark
    cdef unsigned int tot_len = rec.tot_len
    o.n = 0
    _lit(o, '{"lsn": "')
    _lsn(o, rec.lsn)
    _lit(o, '", "prev": "')
    _lsn(o, rec.prev)
    _lit(o, '", "xid": ')
    _dec(o, <unsigned int> rec.xid)
    _lit(o, ', "rmgr": ')
    name = _rmgr_json[rmid]
    if name is None:
        name = _rmgr_json[rmid] = _json_str(rmgr_name(rmid)).encode("ascii")
    _bytes(o, name)
    blocks = rec.blocks
    for b in blocks:
        image = b.image
        if image is not None:
            images += len(image)
    _lit(o, ', "tot_len": ')
    _dec(o, tot_len)
    _lit(o, ', "rec_len": ')
    if images > tot_len:  # not from a reader: the reference's arithmetic
        _bytes(o, str(tot_len - images).encode("ascii"))
    else:
        _dec(o, tot_len - images)
    _lit(o, ', "blocks": [')
    for b in blocks:
        _lit(o, '{"id": ' if first else ', {"id": ')
        first = 0
        _dec(o, <unsigned int> b.id)
        _lit(o, ', "rel": "')
        loc = b.rlocator
        _dec(o, <unsigned int> loc[0])
        _lit(o, "/")
        _dec(o, <unsigned int> loc[1])
        _lit(o, "/")
        _dec(o, <unsigned int> loc[2])
        _lit(o, '", "fork": ')
        fork = b.fork
        if 0 <= fork < len(_fork_json):
            _bytes(o, _fork_json[fork])
        else:
            _bytes(o, _json_str(f"fork{fork}").encode("ascii"))
        _lit(o, ', "blk": ')
        _dec(o, <unsigned int> b.blkno)
        _lit(o, ', "image": false}' if b.image is None else ', "image": true}')
    _lit(o, '], "desc": ')
    mark = o.n
    _lit(o, '"')
    text = _describe(o, rec, version)
    if text is None:  # ASCII without quotes or backslashes: the JSON string as it is
        _lit(o, '"}')
    else:
        o.n = mark
        _bytes(o, _json_str(text).encode("ascii"))
        _lit(o, "}")
    return _text(o)


_fork_json.extend(_json_str(f).encode("ascii") for f in FORK_NAMES)
