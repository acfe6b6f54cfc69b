# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of ``encode_runs`` and ``decode_entries`` (:mod:`cdclake.decoding.spill`, see
:mod:`cdclake.native`): a spilled change's entry written into one buffer, and read back into a
Change and its WalTuples without ``struct``, slices or their ``__init__`` (the Python frames a
change cost each way). The changes that carry a payload (TRUNCATE, MESSAGE, TOAST chunks) go
to the reference's ``encode_change`` and ``decode_change``, whose bytes are the same;
the decoding suites run with both (``test_reorder`` reads what the other wrote).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcmp, memcpy

from cdclake.wal._primitives cimport crc32c_of
from cdclake.decoding._changes cimport ChangeSlots, change_slots
from cdclake.wal._slots cimport blank, get, put

from cdclake.decoding import spill
from cdclake.decoding.changes import MESSAGE, TOAST_CHUNK, TRUNCATE, Change
from cdclake.errors import SpillError
from cdclake.wal.record import RelFileLocator, WalTuple

cdef int HEAD = 16  # u8 action, u64 lsn, u32 seq, u16 origin, u8 flags
cdef int ENTRY = 8  # u32 body length, u32 crc
cdef int LOC = 12
cdef int TUP = 9  # u16 infomask2, u16 infomask, u8 t_hoff, u32 len
cdef int F_CLEAR_TOAST = spill.F_CLEAR_TOAST
cdef int F_LOCATOR = spill.F_LOCATOR
cdef int F_OLD = spill.F_OLD
cdef int F_NEW = spill.F_NEW
cdef int A_TRUNCATE = TRUNCATE
cdef int A_MESSAGE = MESSAGE
cdef int A_TOAST_CHUNK = TOAST_CHUNK
cdef ChangeSlots CS = change_slots(Change, WalTuple)


cdef inline void _le(unsigned char *p, unsigned long long v, int n) noexcept:
    cdef int i
    for i in range(n):
        p[i] = (v >> (8 * i)) & 0xFF


cdef inline unsigned long long _un(const unsigned char *p, int n) noexcept:
    cdef unsigned long long v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline bint _plain(c) except -1:
    """A change whose entry is made here: a Change with no payload, its tuples WalTuples."""
    if type(c) is not Change or get(c, CS.payload) is not None:
        return False
    old, new = get(c, CS.old), get(c, CS.new)
    return ((old is None or type(old) is WalTuple) and (new is None or type(new) is WalTuple)
            and get(c, CS.action) not in (A_TRUNCATE, A_MESSAGE, A_TOAST_CHUNK))


cdef inline Py_ssize_t _tuple_size(t):
    return 0 if t is None else TUP + PyBytes_GET_SIZE(<bytes> get(t, CS.t_data))


cdef Py_ssize_t _put_tuple(unsigned char *p, t) except -1:
    data = <bytes> get(t, CS.t_data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    _le(p, <unsigned short> get(t, CS.t_infomask2), 2)
    _le(p + 2, <unsigned short> get(t, CS.t_infomask), 2)
    p[4] = <unsigned char> get(t, CS.t_hoff)
    _le(p + 5, <unsigned int> n, 4)
    memcpy(p + TUP, PyBytes_AS_STRING(data), n)
    return TUP + n


cdef Py_ssize_t _entry_size(c) except -1:
    return (ENTRY + HEAD + (LOC if get(c, CS.locator) is not None else 0)
            + _tuple_size(get(c, CS.old)) + _tuple_size(get(c, CS.new)))


cdef Py_ssize_t _put_entry(unsigned char *p, c) except -1:
    """Write ``c``'s entry at ``p`` (``_entry_size`` bytes); the bytes written."""
    loc, old, new = get(c, CS.locator), get(c, CS.old), get(c, CS.new)
    cdef int flags = F_CLEAR_TOAST if get(c, CS.clear_toast) else 0
    if loc is not None:
        flags |= F_LOCATOR
    if old is not None:
        flags |= F_OLD
    if new is not None:
        flags |= F_NEW
    cdef unsigned char *b = p + ENTRY
    b[0] = <unsigned char> get(c, CS.action)
    _le(b + 1, <unsigned long long> get(c, CS.lsn), 8)
    _le(b + 9, <unsigned int> get(c, CS.seq), 4)
    _le(b + 13, <unsigned short> get(c, CS.origin), 2)
    b[15] = flags
    cdef Py_ssize_t n = HEAD
    if loc is not None:
        spc, db, rel = loc
        _le(b + n, <unsigned int> spc, 4)
        _le(b + n + 4, <unsigned int> db, 4)
        _le(b + n + 8, <unsigned int> rel, 4)
        n += LOC
    if old is not None:
        n += _put_tuple(b + n, old)
    if new is not None:
        n += _put_tuple(b + n, new)
    _le(p, <unsigned int> n, 4)
    _le(p + 4, crc32c_of(b, n), 4)
    return ENTRY + n


def encode_runs(changes, long long segment_size):
    """See ``spill.encode_runs``."""
    cdef list out = []
    cdef Py_ssize_t i = 0, j, k = len(changes), total
    cdef unsigned char *p
    cdef list entries
    while i < k:
        segno = changes[i].lsn // segment_size
        j = i
        total = 0
        entries = []  # per change: None (its entry made here), or the reference's bytes
        while j < k and changes[j].lsn // segment_size == segno:
            c = changes[j]
            e = None if _plain(c) else spill.encode_change(c)
            entries.append(e)
            total += _entry_size(c) if e is None else PyBytes_GET_SIZE(e)
            j += 1
        data = PyBytes_FromStringAndSize(NULL, total)
        p = <unsigned char *> PyBytes_AS_STRING(data)
        for c, e in zip(changes[i:j], entries):
            if e is None:
                p += _put_entry(p, c)
            else:
                memcpy(p, PyBytes_AS_STRING(e), PyBytes_GET_SIZE(e))
                p += PyBytes_GET_SIZE(e)
        out.append((segno, j - i, data))
        i = j
    return out


cdef object _tuple_at(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end):
    cdef Py_ssize_t at = pos[0]
    if at + TUP > end:
        raise SpillError("tuple header past the entry")
    cdef Py_ssize_t n = <Py_ssize_t> _un(b + at + 5, 4)
    if at + TUP + n > end:
        raise SpillError("tuple past the entry")
    t = blank(WalTuple)
    put(t, CS.t_infomask2, <int> _un(b + at, 2))
    put(t, CS.t_infomask, <int> _un(b + at + 2, 2))
    put(t, CS.t_hoff, <int> b[at + 4])
    put(t, CS.t_data, PyBytes_FromStringAndSize(<const char *> b + at + TUP, n))
    pos[0] = at + TUP + n
    return t


def decode_entries(bytes data, offset, path):
    """See ``spill.decode_entries``."""
    cdef const unsigned char *d = <const unsigned char *> PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t pos = 0, n, at, end
    cdef unsigned int crc
    cdef int action, flags
    cdef const unsigned char *b
    cdef const unsigned char *last_loc = NULL
    cdef list out = []
    loc = None
    while pos + ENTRY <= size:
        n = <Py_ssize_t> _un(d + pos, 4)
        end = pos + ENTRY + n
        if end > size:
            break
        b = d + pos + ENTRY
        crc = <unsigned int> _un(d + pos + 4, 4)
        if crc32c_of(b, n) != crc:
            raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}")
        action = b[0] if n else -1
        if n < HEAD or action in (A_TRUNCATE, A_MESSAGE, A_TOAST_CHUNK):
            out.append(spill.decode_change(data[pos + ENTRY:end]))
            pos = end
            continue
        flags = b[15]
        c = blank(Change)
        put(c, CS.action, action)
        put(c, CS.lsn, _un(b + 1, 8))
        put(c, CS.seq, <unsigned int> _un(b + 9, 4))
        put(c, CS.origin, <int> _un(b + 13, 2))
        put(c, CS.clear_toast, bool(flags & F_CLEAR_TOAST))
        put(c, CS.payload, None)
        at = HEAD
        if flags & F_LOCATOR:
            if at + LOC > n:
                raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}")
            # consecutive changes of one table share its locator
            if last_loc == NULL or memcmp(last_loc, b + at, LOC) != 0:
                loc = RelFileLocator(<unsigned int> _un(b + at, 4),
                                     <unsigned int> _un(b + at + 4, 4),
                                     <unsigned int> _un(b + at + 8, 4))
            last_loc = b + at
            put(c, CS.locator, loc)
            at += LOC
        else:
            put(c, CS.locator, None)
        try:
            put(c, CS.old, _tuple_at(b, &at, n) if flags & F_OLD else None)
            put(c, CS.new, _tuple_at(b, &at, n) if flags & F_NEW else None)
        except SpillError:
            raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}") from None
        out.append(c)
        pos = end
    return out, pos

