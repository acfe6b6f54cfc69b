# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.tuples.jsonb.text` (see :mod:`cdclake.native`): jsonb_out
of a jsonb container, written as UTF-8 into one growing C buffer and decoded once.

Strings are escaped byte by byte, which is escape_json's result: the bytes it escapes (ASCII
controls, ``"`` and ``\\``) never occur inside a multi-byte UTF-8 sequence, and the one strict
decode at the end checks every string is UTF-8. Numerics go through ``numeric.text`` (its own
twin). Anything the twin does not take as well-formed — a header, entry or offset out of
place, invalid UTF-8, a numeric that does not fit its entry or does not read — goes to the
Python reference, which returns its text or raises its JsonbFormatError.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8

from cdclake.tuples._out cimport Out, grow, put

from cdclake.tuples import jsonb as _reference
from cdclake.tuples import numeric

cdef unsigned int JB_CMASK = 0x0FFFFFFF
cdef unsigned int JB_FSCALAR = 0x10000000
cdef unsigned int JB_FOBJECT = 0x20000000
cdef unsigned int JB_FARRAY = 0x40000000
cdef unsigned int OFFLENMASK = 0x0FFFFFFF
cdef unsigned int TYPEMASK = 0x70000000
cdef unsigned int HAS_OFF = 0x80000000
cdef unsigned int ISSTRING = 0x00000000
cdef unsigned int ISNUMERIC = 0x10000000
cdef unsigned int ISBOOL_FALSE = 0x20000000
cdef unsigned int ISBOOL_TRUE = 0x30000000
cdef unsigned int ISNULL = 0x40000000
cdef unsigned int ISCONTAINER = 0x50000000
cdef int MAX_DEPTH = 1000  # deeper than PostgreSQL's own stack allows: the reference's

cdef const char *HEX = b"0123456789abcdef"


cdef int _string(Out *o, const unsigned char *s, Py_ssize_t k) except -1:
    """escape_json of a UTF-8 string, quotes included."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if o.n + 6 * k + 2 > o.cap:
        grow(o, 6 * k + 2)
    cdef char *d = o.p + o.n
    d[0] = 34
    d += 1
    for i in range(k):
        c = s[i]
        if c >= 0x20 and c != 34 and c != 92:
            d[0] = c
            d += 1
        elif c == 34 or c == 92:
            d[0] = 92
            d[1] = c
            d += 2
        elif c == 0x08 or c == 0x0C or c == 0x0A or c == 0x0D or c == 0x09:
            d[0] = 92
            d[1] = (98 if c == 0x08 else 102 if c == 0x0C else 110 if c == 0x0A
                    else 114 if c == 0x0D else 116)
            d += 2
        else:
            d[0] = 92
            d[1] = 117  # \u00XX
            d[2] = 48
            d[3] = 48
            d[4] = HEX[c >> 4]
            d[5] = HEX[c & 15]
            d += 6
    d[0] = 34
    o.n = d + 1 - o.p
    return 0


cdef inline unsigned int _u32(const unsigned char *b) noexcept:
    return b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)


cdef int _scalar(Out *o, const unsigned char *b, Py_ssize_t n, Py_ssize_t base,
                 unsigned int jtype, Py_ssize_t off, Py_ssize_t length, int depth) except -1:
    """One child; 1 when the twin does not take it (the reference must), else 0."""
    cdef Py_ssize_t start, end, size
    if length < 0 or base + off + length > n:
        return 1
    if jtype == ISSTRING:
        _string(o, b + base + off, length)
    elif jtype == ISNUMERIC:
        start = base + ((off + 3) & ~3)
        end = base + off + length
        if end - start < 4 or b[start] & 1:  # a 1-byte header: the reference's rare path
            return 1
        size = _u32(b + start) >> 2
        if size < 4 or size > end - start:
            return 1
        try:
            digits = numeric.text(PyBytes_FromStringAndSize(<const char *> b + start + 4,
                                                            size - 4)).encode("ascii")
        except ValueError:  # a malformed numeric: the reference says what is wrong first
            return 1
        put(o, PyBytes_AS_STRING(digits), PyBytes_GET_SIZE(digits))
    elif jtype == ISBOOL_TRUE:
        put(o, b"true", 4)
    elif jtype == ISBOOL_FALSE:
        put(o, b"false", 5)
    elif jtype == ISNULL:
        put(o, b"null", 4)
    elif jtype == ISCONTAINER:
        return _container(o, b, n, base + ((off + 3) & ~3), False, depth + 1)
    else:
        return 1
    return 0


cdef int _container(Out *o, const unsigned char *b, Py_ssize_t n, Py_ssize_t start,
                    bint scalar, int depth) except -1:
    """A container at ``start``; 1 when the twin does not take it, else 0."""
    cdef unsigned int header, count, nentries, je, i
    cdef Py_ssize_t base, off = 0, end
    cdef bint is_object
    cdef unsigned int *types = NULL
    cdef Py_ssize_t *offs = NULL
    cdef int r = 0
    if depth > MAX_DEPTH or start < 0 or start + 4 > n:
        return 1
    header = _u32(b + start)
    count = header & JB_CMASK
    is_object = (header & JB_FOBJECT) != 0
    if not is_object and not header & JB_FARRAY:
        return 1
    nentries = count * 2 if is_object else count
    base = start + 4 + 4 * <Py_ssize_t> nentries
    if base > n:
        return 1
    types = <unsigned int *> PyMem_Malloc(sizeof(unsigned int) * nentries + 1)
    offs = <Py_ssize_t *> PyMem_Malloc(sizeof(Py_ssize_t) * (nentries + 1))
    if types == NULL or offs == NULL:
        PyMem_Free(types)
        PyMem_Free(offs)
        raise MemoryError()
    try:
        for i in range(nentries):
            je = _u32(b + start + 4 + 4 * i)
            end = (je & OFFLENMASK) if je & HAS_OFF else off + (je & OFFLENMASK)
            types[i] = je & TYPEMASK
            offs[i] = off
            off = end
        offs[nentries] = off
        if base + off > n:
            return 1
        if scalar:
            if nentries < 1:
                return 1
            return _scalar(o, b, n, base, types[0], offs[0], offs[1] - offs[0], depth)
        if is_object:
            put(o, b"{", 1)
            for i in range(count):
                if i:
                    put(o, b", ", 2)
                if types[i] != ISSTRING or offs[i + 1] < offs[i] or base + offs[i + 1] > n:
                    return 1
                _string(o, b + base + offs[i], offs[i + 1] - offs[i])
                put(o, b": ", 2)
                r = _scalar(o, b, n, base, types[count + i], offs[count + i],
                            offs[count + i + 1] - offs[count + i], depth)
                if r:
                    return r
            put(o, b"}", 1)
        else:
            put(o, b"[", 1)
            for i in range(count):
                if i:
                    put(o, b", ", 2)
                r = _scalar(o, b, n, base, types[i], offs[i], offs[i + 1] - offs[i], depth)
                if r:
                    return r
            put(o, b"]", 1)
        return 0
    finally:
        PyMem_Free(types)
        PyMem_Free(offs)


def text(p):
    """See ``jsonb.text``."""
    if type(p) is not bytes:
        return _reference._python_text(p)
    cdef const unsigned char *b = <const unsigned char *> PyBytes_AS_STRING(p)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(p)
    cdef unsigned int header
    cdef Out o
    cdef int r
    if n < 4:
        return _reference._python_text(p)
    header = _u32(b)
    if header & JB_FSCALAR and (header & JB_CMASK != 1 or not header & JB_FARRAY):
        return _reference._python_text(p)
    o.cap = 64 + 2 * n
    o.n = 0
    o.p = <char *> PyMem_Malloc(o.cap)
    if o.p == NULL:
        raise MemoryError()
    try:
        r = _container(&o, b, n, 0, (header & JB_FSCALAR) != 0, 0)
        if r:
            return _reference._python_text(p)
        try:
            return PyUnicode_DecodeUTF8(o.p, o.n, NULL)
        except UnicodeDecodeError:
            return _reference._python_text(p)
    finally:
        PyMem_Free(o.p)
