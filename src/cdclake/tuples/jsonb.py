# cython: boundscheck=False, wraparound=False, cdivision=True
"""jsonb's on-disk container format (utils/jsonb.h) -> jsonb_out text.

A container is a uint32 header (count in the low 28 bits; flags 0x10000000 raw scalar,
0x20000000 object, 0x40000000 array), then one JEntry per child (objects: all keys, then all
values, keys in storage order), then the children's data. A JEntry is a uint32: type in bits
28-30, and in the low 28 bits either the child's length or — every 32nd entry, flagged by the
top bit — the end offset of its data. Numerics and nested containers are int-aligned inside
the data area (their length includes that padding); numerics are whole numeric varlenas.

Output (JsonbToCStringWorker without indent): ``{"k": v, "k2": [1, 2]}`` — ", " between
items, ": " after keys, strings escaped by escape_json, a raw scalar printed bare.

:func:`text` runs once per jsonb value a decoder prints, so it writes the text as UTF-8 into
one growing buffer, escaping strings byte by byte (escape_json's result: the bytes it escapes,
ASCII controls, ``"`` and ``\\``, never occur inside a multi-byte sequence), and decodes it
once, which checks every string is UTF-8; the file is compiled as itself (Cython's
pure-Python mode, ``_jsonb.pxd``), where the buffer is written through a C pointer. A
container nested deeper than :data:`MAX_DEPTH` is refused (PostgreSQL's own limit is its
stack, some thousands of levels; Python's recursion stops near a thousand frames).
"""

from __future__ import annotations

from cdclake import native
from cdclake.tuples import numeric

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._ints import le_uint
    from cython.cimports.cdclake.wal._primitives import bytes_of
    from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING
else:
    from cdclake.tuples.ints import le_uint
    from cdclake.wal.primitives import bytes_of

JB_CMASK = 0x0FFFFFFF
JB_FSCALAR = 0x10000000
JB_FOBJECT = 0x20000000
JB_FARRAY = 0x40000000

JENTRY_OFFLENMASK = 0x0FFFFFFF
JENTRY_TYPEMASK = 0x70000000
JENTRY_HAS_OFF = 0x80000000
JENTRY_ISSTRING = 0x00000000
JENTRY_ISNUMERIC = 0x10000000
JENTRY_ISBOOL_FALSE = 0x20000000
JENTRY_ISBOOL_TRUE = 0x30000000
JENTRY_ISNULL = 0x40000000
JENTRY_ISCONTAINER = 0x50000000

MAX_DEPTH = 400  #: containers inside containers, at most
#: escape_json's second byte after a backslash for the controls it writes short (0: \u00XX)
_SHORT = bytes(98 if c == 0x08 else 116 if c == 0x09 else 110 if c == 0x0A
               else 102 if c == 0x0C else 114 if c == 0x0D else 0 for c in range(0x20))
_HEX = b"0123456789abcdef"


class JsonbFormatError(ValueError):
    """The bytes are not a jsonb container."""


def text(p: bytes) -> str:
    """jsonb_out of a jsonb payload (the bytes after the varlena header)."""
    b = p if type(p) is bytes else bytes(p)
    bp = bytes_of(b)
    n = len(b)
    header = u32(bp, n, 0)
    if header & JB_FSCALAR and (header & JB_CMASK != 1 or not header & JB_FARRAY):
        raise JsonbFormatError(f"raw scalar container with header 0x{header:08X}")
    out = bytearray(64 + 2 * n)
    end = container(out, 0, b, bp, n, 0, header & JB_FSCALAR != 0, 0)
    buf = PyByteArray_AS_STRING(out) if cython.compiled else out
    try:
        return buf[:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonbFormatError(f"jsonb string is not valid UTF-8: {exc.reason}") from None


def u32(bp: bytes, n: int, off: int) -> int:
    if off < 0 or off + 4 > n:
        raise JsonbFormatError(f"jsonb data cut off at byte {off}")
    return le_uint(bp, off, 4)


def container(out: bytearray, o: int, b: bytes, bp: bytes, n: int, start: int, scalar: bool,
              depth: int) -> int:
    """Write the container at ``start`` at ``out[o]``; where its text ends."""
    if depth > MAX_DEPTH:
        raise JsonbFormatError(f"jsonb containers nested more than {MAX_DEPTH} deep")
    header = u32(bp, n, start)
    count = header & JB_CMASK
    is_object = header & JB_FOBJECT != 0
    if not is_object and not header & JB_FARRAY:
        raise JsonbFormatError(f"jsonb container header 0x{header:08X} is neither array nor object")
    nentries = count * 2 if is_object else count
    jstart = start + 4
    base = jstart + 4 * nentries  # data area
    if base > n:
        raise JsonbFormatError(f"jsonb container of {count} items is cut off")
    # where each child's data starts: the entries before it give it (every 32nd by offset)
    end = keys_end = 0
    for i in range(nentries):
        end = entry_end(bp, jstart, i, end)
        if i == count - 1:
            keys_end = end
    if base + end > n:
        raise JsonbFormatError("jsonb container data is cut off")
    if scalar:
        return child(out, o, b, bp, n, base, jentry(bp, jstart, 0), 0, entry_end(bp, jstart, 0, 0),
                     depth)
    o = put(out, o, b"{" if is_object else b"[")
    koff = 0
    voff = keys_end if is_object and count else 0
    for i in range(count):
        if i:
            o = put(out, o, b", ")
        if is_object:
            kend = entry_end(bp, jstart, i, koff)
            if jentry(bp, jstart, i) & JENTRY_TYPEMASK != JENTRY_ISSTRING:
                raise JsonbFormatError("jsonb object key is not a string")
            o = string(out, o, bp, base + koff, base + kend, n)
            o = put(out, o, b": ")
            koff = kend
            k = count + i
        else:
            k = i
        vend = entry_end(bp, jstart, k, voff)
        o = child(out, o, b, bp, n, base, jentry(bp, jstart, k), voff, vend, depth)
        voff = vend
    return put(out, o, b"}" if is_object else b"]")


def entry_end(bp: bytes, jstart: int, i: int, off: int) -> int:
    """Where child ``i``'s data ends (relative to the data area), given where it starts."""
    je = jentry(bp, jstart, i)
    return je & JENTRY_OFFLENMASK if je & JENTRY_HAS_OFF else off + (je & JENTRY_OFFLENMASK)


def jentry(bp: bytes, jstart: int, i: int) -> int:
    """JEntry ``i`` (``ints.le_uint``'s read, here where the C compiler can inline it: a
    container reads each entry twice)."""
    at = jstart + 4 * i
    return bp[at] | bp[at + 1] << 8 | bp[at + 2] << 16 | bp[at + 3] << 24


def child(out: bytearray, o: int, b: bytes, bp: bytes, n: int, base: int, je: int, off: int,
          end: int, depth: int) -> int:
    """Write the child whose JEntry is ``je`` and whose data is ``[base+off, base+end)``."""
    jtype = je & JENTRY_TYPEMASK
    if jtype == JENTRY_ISSTRING:
        return string(out, o, bp, base + off, base + end, n)
    if jtype == JENTRY_ISNUMERIC:
        lo = min(base + ((off + 3) & ~3), n)  # the entry's bytes there are
        digits = numeric.text(numeric_payload(b, bp, lo, max(lo, min(base + end, n))))
        return put(out, o, digits.encode("ascii"))
    if jtype == JENTRY_ISBOOL_TRUE:
        return put(out, o, b"true")
    if jtype == JENTRY_ISBOOL_FALSE:
        return put(out, o, b"false")
    if jtype == JENTRY_ISNULL:
        return put(out, o, b"null")
    if jtype == JENTRY_ISCONTAINER:
        return container(out, o, b, bp, n, base + ((off + 3) & ~3), False, depth + 1)
    raise JsonbFormatError(f"unknown jsonb entry type 0x{jtype:08X}")


def numeric_payload(b: bytes, bp: bytes, lo: int, hi: int) -> bytes:
    """The numeric varlena ``b[lo:hi]`` inside jsonb: its payload after a 4-byte header (or,
    defensively, a 1-byte one)."""
    if hi <= lo:
        raise JsonbFormatError("jsonb numeric is empty")
    b0 = bp[lo]
    if b0 & 1:
        return b[lo + 1:lo + max(1, min(b0 >> 1, hi - lo))]
    if hi - lo < 4:
        raise JsonbFormatError("jsonb numeric header cut off")
    size = le_uint(bp, lo, 4) >> 2
    if size > hi - lo or size < 4:
        raise JsonbFormatError(f"jsonb numeric of {size} bytes does not fit its entry")
    return b[lo + 4:lo + size]


def room(out: bytearray, o: int, k: int) -> None:
    """At least ``k`` bytes of ``out`` free after ``o`` (the buffer at least doubles)."""
    if o + k > len(out):
        out.extend(bytes(max(len(out), o + k - len(out))))


def put(out: bytearray, o: int, s: bytes) -> int:
    room(out, o, len(s))
    buf = PyByteArray_AS_STRING(out) if cython.compiled else out
    for i in range(len(s)):
        buf[o + i] = s[i]
    return o + len(s)


def string(out: bytearray, o: int, bp: bytes, lo: int, hi: int, n: int) -> int:
    """escape_json of the string bytes ``[lo, hi)`` (cut to the data there is), quotes
    included."""
    hi = min(hi, n)
    k = max(0, hi - lo)
    room(out, o, 6 * k + 2)
    buf = PyByteArray_AS_STRING(out) if cython.compiled else out
    buf[o] = 34  # "
    o += 1
    for i in range(lo, lo + k):
        c = bp[i]
        if c >= 0x20 and c != 34 and c != 92:
            buf[o] = c
            o += 1
        elif c == 34 or c == 92:
            buf[o] = 92  # backslash
            buf[o + 1] = c
            o += 2
        elif _SHORT[c]:
            buf[o] = 92
            buf[o + 1] = _SHORT[c]
            o += 2
        else:  # \u00XX
            buf[o] = 92
            buf[o + 1] = 117
            buf[o + 2] = 48
            buf[o + 3] = 48
            buf[o + 4] = _HEX[c >> 4]
            buf[o + 5] = _HEX[c & 15]
            o += 6
    buf[o] = 34
    return o + 1


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    text = native.twin(text, "cdclake.tuples._jsonb")
