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

Everything else, and any record too short for its layout, goes to the Python reference
(``waldump._python_describe``), which returns its text or raises its WalCorruptError: the
text is the same either way, which the waldump tests check record by record.
"""

import importlib
from json.encoder import encode_basestring_ascii as _json_str

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.string cimport strlen

from cdclake.decoding.rmgrs import identify, rmgr_name
from cdclake.wal.record import FORK_NAMES, RM_HEAP2_ID, RM_HEAP_ID, RM_XACT_ID
from cdclake.wal.rmgr import heap, heap2, xact

from cdclake.tuples._out cimport Out, put
from cdclake.wal._payload cimport Bytes, payload, readable

cdef int HEAP_OPMASK = heap.XLOG_HEAP_OPMASK
cdef int HEAP_INSERT = heap.XLOG_HEAP_INSERT
cdef int HEAP_UPDATE = heap.XLOG_HEAP_UPDATE
cdef int HEAP_HOT_UPDATE = heap.XLOG_HEAP_HOT_UPDATE
cdef int HEAP_DELETE = heap.XLOG_HEAP_DELETE
cdef int HEAP_LOCK = heap.XLOG_HEAP_LOCK
cdef int UPDATE_CONTAINS_OLD = heap.XLH_UPDATE_CONTAINS_OLD
cdef int UPDATE_PREFIX_FROM_OLD = heap.XLH_UPDATE_PREFIX_FROM_OLD
cdef int UPDATE_SUFFIX_FROM_OLD = heap.XLH_UPDATE_SUFFIX_FROM_OLD
cdef int DELETE_CONTAINS_OLD = heap.XLH_DELETE_CONTAINS_OLD
cdef int HEAP2_OPMASK = heap2.XLOG_HEAP2_OPMASK
cdef int HEAP2_MULTI_INSERT = heap2.XLOG_HEAP2_MULTI_INSERT
cdef int HEAP2_NEW_CID = heap2.XLOG_HEAP2_NEW_CID
cdef int XACT_OPMASK = xact.XLOG_XACT_OPMASK
cdef int XACT_COMMIT = xact.XLOG_XACT_COMMIT
cdef int XACT_HAS_INFO = xact.XLOG_XACT_HAS_INFO
cdef unsigned int XINFO_HAS_DBINFO = xact.XACT_XINFO_HAS_DBINFO
cdef int C_HEAP = RM_HEAP_ID, C_HEAP2 = RM_HEAP2_ID, C_XACT = RM_XACT_ID
cdef int HEADER = 5  # xl_heap_header: t_infomask2, t_infomask, t_hoff

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


cdef inline unsigned int _u16(const unsigned char *b) noexcept:
    return b[0] | (b[1] << 8)


cdef inline unsigned int _u32(const unsigned char *b) noexcept:
    return b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)


cdef bint _heap_desc(Out *o, rec, int op) except -1:
    """The description of a heap INSERT/UPDATE/HOT_UPDATE/DELETE after its type, or False
    when the record is not one ``heap.parse`` takes without complaint."""
    cdef Bytes md, bd
    cdef Py_ssize_t p = 0
    cdef int flags
    blocks = rec.blocks
    main = rec.main_data
    if not blocks or not readable(main):
        return False
    md = payload(main)
    data = blocks[0].data
    if data is not None and not readable(data):
        return False
    if op == HEAP_INSERT:
        if md.n < 3 or (data and payload(data).n < HEADER):
            return False
        _lit(o, " off: ")
        _dec(o, _u16(md.p))
        _lit(o, ", flags: 0x")
        _hex(o, md.p[2], 2)
        return True
    if op == HEAP_DELETE:
        if md.n < 8:
            return False
        flags = md.p[7]
        if flags & DELETE_CONTAINS_OLD and md.n < 8 + HEADER:
            return False
        _lit(o, " xmax: ")
        _dec(o, _u32(md.p))
        _lit(o, ", off: ")
        _dec(o, _u16(md.p + 4))
        _lit(o, ", infobits: 0x")
        _hex(o, md.p[6], 2)
        _lit(o, ", flags: 0x")
        _hex(o, flags, 2)
        return True
    # UPDATE, HOT_UPDATE
    if md.n < 14:
        return False
    flags = md.p[7]
    if flags & UPDATE_CONTAINS_OLD and md.n < 14 + HEADER:
        return False
    if data:
        bd = payload(data)
        if flags & UPDATE_PREFIX_FROM_OLD:
            p += 2
        if flags & UPDATE_SUFFIX_FROM_OLD:
            p += 2
        if bd.n < p + HEADER:
            return False
    _lit(o, " old_xmax: ")
    _dec(o, _u32(md.p))
    _lit(o, ", old_off: ")
    _dec(o, _u16(md.p + 4))
    _lit(o, ", old_infobits: 0x")
    _hex(o, md.p[6], 2)
    _lit(o, ", flags: 0x")
    _hex(o, flags, 2)
    _lit(o, ", new_xmax: ")
    _dec(o, _u32(md.p + 8))
    _lit(o, ", new_off: ")
    _dec(o, _u16(md.p + 12))
    return True


cdef bint _commit_desc(Out *o, rec) except -1:
    """A plain COMMIT's description (its time), or False for any other commit."""
    cdef Bytes md
    cdef unsigned int xinfo = 0
    cdef Py_ssize_t need = 8
    cdef long long us
    main = rec.main_data
    if not readable(main):
        return False
    md = payload(main)
    if rec.info & XACT_HAS_INFO:
        if md.n < 12:
            return False
        xinfo = _u32(md.p + 8)
        need = 12
        if xinfo & ~XINFO_HAS_DBINFO:
            return False
        if xinfo & XINFO_HAS_DBINFO:
            need += 8
    if md.n < need:
        return False
    us = <long long> (_u32(md.p) | (<unsigned long long> _u32(md.p + 4) << 32))
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
        if _commit_desc(o, rec):
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
