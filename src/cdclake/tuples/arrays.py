# cython: boundscheck=False, wraparound=False, cdivision=True
"""Arrays on disk (utils/array.h) -> element payloads, and array_out / array_in text rules.

After the varlena header: int32 ndim, int32 dataoffset (0 when there is no null bitmap), oid
elemtype, int32 dims[ndim], int32 lbounds[ndim], the null bitmap (bit set = present) when
dataoffset != 0, then the elements from MAXALIGN of the overhead (or dataoffset). Offsets
count from the start of the 4-byte header, so alignment here adds those 4 bytes back.
Elements are always aligned to the element type's typalign (att_align_nominal), varlena
elements included; they are never compressed or external.

An Arrow list is one-dimensional and starts at 1, so an array with more dimensions or another
lower bound has no typed value (:class:`~cdclake.tuples.untypeable.NotTypeable`, checked by
:func:`check_listable` and :func:`parse_literal`); its text keeps every bound.

:func:`text` runs once per array value a decoder prints, so this file is compiled as itself
(Cython's pure-Python mode, ``_arrays.pxd``): the commonest arrays, one-dimensional int2[],
int4[] and int8[] starting at 1, are written digit by digit into one buffer
(:func:`int_list_text`), with no per-element text or quoting.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cdclake import native
from cdclake.tuples import scalars
from cdclake.tuples.untypeable import NotTypeable

try:
    import cython
except ImportError:  # Cython is a build tool: Python runs this module without it
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.tuples._ints import le_int, le_uint, put_int
    from cython.cimports.cdclake.wal._primitives import bytes_of
    from cython.cimports.cpython.bytearray import PyByteArray_AS_STRING
else:
    from cdclake.tuples.ints import le_int, le_uint, put_int
    from cdclake.wal.primitives import bytes_of

_ALIGN = {"c": 0, "s": 1, "i": 3, "d": 7}
_SPACE = frozenset(" \t\n\r\v\f")
VARHDRSZ = 4
MAXDIM = 6
MAX_ARRAY_SIZE = 0x3FFFFFFF // 8  # utils/array.h MaxArraySize: MaxAllocSize / sizeof(Datum)


class ArrayFormatError(ValueError):
    """The bytes are not an array of the expected element type, or text is no array literal."""


def parse(p: bytes, elem_len: int, elem_align: str,
          elem_oid: int | None = None) -> tuple[list[int], list[int], list[bytes | None]]:
    """(dims, lower bounds, element payloads in row-major order, None for NULL)."""
    b = p if type(p) is bytes else bytes(p)
    dims, lbs, nitems, bitmap_at, off = header(b, elem_oid)
    items: list[bytes | None] = []
    walk(b, nitems, bitmap_at, off, elem_len, _ALIGN.get(elem_align, 0), items,
         cython.NULL if cython.compiled else bytearray(), 0)
    return dims, lbs, items


def header(b: bytes, elem_oid: int | None) -> tuple[list[int], list[int], int, int, int]:
    """(dims, lower bounds, how many elements, where the null bitmap is (0: none), where the
    data starts, before its alignment)."""
    n = len(b)
    if n < 12:
        raise ArrayFormatError(f"array of {n} bytes is shorter than its header")
    bp = bytes_of(b)
    ndim = le_int(bp, 0, 4)
    dataoffset = le_int(bp, 4, 4)
    elemtype = le_uint(bp, 8, 4)
    if ndim == 0:
        return [], [], 0, 0, 0
    if ndim < 0 or ndim > MAXDIM:
        raise ArrayFormatError(f"array has {ndim} dimensions")
    if elem_oid is not None and elemtype != elem_oid:
        raise ArrayFormatError(
            f"array element type oid {elemtype} differs from the column's element type "
            f"{elem_oid}")
    if 12 + 8 * ndim > n:
        raise ArrayFormatError("array dimensions are cut off")
    dims = [le_int(bp, 12 + 4 * i, 4) for i in range(ndim)]
    lbs = [le_int(bp, 12 + 4 * (ndim + i), 4) for i in range(ndim)]
    nitems = 1
    for d in dims:
        if d < 0:
            raise ArrayFormatError(f"array dimension {d} is negative")
        nitems *= d
        if nitems > MAX_ARRAY_SIZE:
            raise ArrayFormatError(f"array of {nitems} elements exceeds the maximum allowed")
    bitmap_at = 12 + 8 * ndim
    if dataoffset:
        off = dataoffset - VARHDRSZ
        if bitmap_at + (nitems + 7) // 8 > off or off > n:
            raise ArrayFormatError(f"array data offset {dataoffset} is impossible")
        return dims, lbs, nitems, bitmap_at if nitems else 0, off
    return dims, lbs, nitems, 0, ((bitmap_at + VARHDRSZ + 7) & ~7) - VARHDRSZ


def walk(b: bytes, nitems: int, bitmap_at: int, off: int, elem_len: int, m: int,
         items: list[bytes | None], buf: bytearray, width: int) -> int:
    """The elements from ``off`` in row-major order (``m``: the alignment mask): each payload,
    None for NULL, appended to ``items``; or, given a ``width`` (an integer element's bytes),
    each element written in decimal (or NULL), comma-separated, into ``buf`` from index 1.
    Returns where that text ends."""
    n = len(b)
    bp = bytes_of(b)
    o = 1
    if elem_len > 0:
        stride = (elem_len + m) & ~m
        off = ((off + VARHDRSZ + m) & ~m) - VARHDRSZ
        if not bitmap_at and off + stride * (nitems - 1) + elem_len > n:
            raise ArrayFormatError(f"array of {nitems} elements is cut off")
        for i in range(nitems):
            if width and i:
                buf[o] = 44  # ,
                o += 1
            if bitmap_at and not b[bitmap_at + (i >> 3)] >> (i & 7) & 1:
                if width:
                    buf[o] = 78  # N
                    buf[o + 1] = 85  # U
                    buf[o + 2] = 76  # L
                    buf[o + 3] = 76  # L
                    o += 4
                else:
                    items.append(None)
                continue
            if off + elem_len > n:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            if width:
                o = put_int(buf, o, le_int(bp, off, width))
            else:
                items.append(b[off:off + elem_len])
            off += stride
        return o
    for i in range(nitems):
        if bitmap_at and not b[bitmap_at + (i >> 3)] >> (i & 7) & 1:
            items.append(None)
            continue
        off = ((off + VARHDRSZ + m) & ~m) - VARHDRSZ
        if off >= n:
            raise ArrayFormatError(f"array element {i + 1} is cut off")
        if elem_len == -1:
            b0 = b[off]
            if b0 & 1:
                if b0 == 1:
                    raise ArrayFormatError(f"array element {i + 1} is an external TOAST pointer")
                size, hdr = b0 >> 1, 1
            else:
                if off + 4 > n:
                    raise ArrayFormatError(f"array element {i + 1} header is cut off")
                word = le_uint(bp, off, 4)
                if word & 3:
                    raise ArrayFormatError(f"array element {i + 1} is compressed")
                size, hdr = word >> 2, 4
            if size < hdr or off + size > n:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            items.append(b[off + hdr:off + size])
            off += size
        else:  # cstring
            nul = b.find(b"\x00", off)
            if nul < 0:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            items.append(b[off:nul])
            off = nul + 1
    return o


def text(p: bytes, elem_len: int, elem_align: str, elem_oid: int | None,
         etext: Callable[[bytes], str], delim: str, quote: Callable[[str], str]) -> str:
    """array_out: the array's text, each present element's by ``etext``; a one-dimensional
    int2[], int4[] or int8[] starting at 1 (no element is quoted) is written digit by digit
    into one buffer."""
    b = p if type(p) is bytes else bytes(p)
    width = 2 if etext is scalars.int2_text else 4 if etext is scalars.int4_text \
        else 8 if etext is scalars.int8_text else 0
    if width and width == elem_len and delim == ",":
        dims, lbs, nitems, bitmap_at, off = header(b, elem_oid)
        if len(dims) == 1 and lbs[0] == 1:
            out = bytearray(nitems * 21 + 2)
            # compiled, the bytearray's storage, written through a C pointer
            buf = PyByteArray_AS_STRING(out) if cython.compiled else out
            buf[0] = 123  # {
            o = walk(b, nitems, bitmap_at, off, elem_len, _ALIGN.get(elem_align, 0), [], buf,
                     width)
            buf[o] = 125  # }
            return buf[:o + 1].decode("ascii")
    dims, lbs, items = parse(b, elem_len, elem_align, elem_oid)
    return format_text(dims, lbs, [None if x is None else etext(x) for x in items], delim,
                       quote)


def check_listable(dims: list[int], lbs: list[int]) -> None:
    """An Arrow list holds a one-dimensional array with lower bound 1 (or an empty one)."""
    if len(dims) > 1:
        raise NotTypeable(f"a {len(dims)}-dimensional array has no Arrow list value")
    if lbs and lbs[0] != 1:
        raise NotTypeable(f"an array with lower bound {lbs[0]} has no Arrow list value")


_BOUNDS_RE = re.compile(r"\[\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*\]")


def quoter(delim: str) -> Callable[[str], str]:
    """array_out's per-element rule: quote empty, NULL-like, or special-character strings."""
    special = re.compile("[{}\"\\\\ \t\n\r\v\f" + re.escape(delim) + "]").search

    def quote(s: str) -> str:
        if s and special(s) is None and not (len(s) == 4 and s.upper() == "NULL"):
            return s
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return quote


def format_text(dims: list[int], lbs: list[int], texts: list[str | None], delim: str,
                quote: Callable[[str], str]) -> str:
    """array_out: '{a,b}', nested braces per dimension, '[l:u]...=' when a bound is not 1."""
    if not dims or any(d == 0 for d in dims):
        return "{}"
    parts = ["NULL" if t is None else quote(t) for t in texts]
    prefix = ""
    if any(lb != 1 for lb in lbs):
        prefix = "".join(f"[{lb}:{lb + d - 1}]" for lb, d in zip(lbs, dims, strict=True)) + "="
    for d in reversed(dims[1:]):
        parts = ["{" + delim.join(parts[k:k + d]) + "}" for k in range(0, len(parts), d)]
    return prefix + "{" + delim.join(parts) + "}"


def parse_literal(s: str, delim: str = ",") -> list[str | None]:
    """array_in for one dimension: element strings (unquoted, unescaped) or None for NULL.

    A literal with more dimensions or a lower bound other than 1 (array_out prints the bounds
    then) raises NotTypeable: it has no list value.
    """
    i = 0
    n = len(s)
    while i < n and s[i] in _SPACE:
        i += 1
    if i < n and s[i] == "[":
        eq = s.find("=", i)
        if eq < 0:
            raise ArrayFormatError(f"array literal {s!r} has dimensions but no '='")
        bounds = _BOUNDS_RE.findall(s, i, eq)
        if not bounds:
            raise ArrayFormatError(f"array literal {s!r} has malformed dimensions")
        check_listable([int(u) - int(lb) + 1 for lb, u in bounds], [int(lb) for lb, _ in bounds])
        i = eq + 1
        while i < n and s[i] in _SPACE:
            i += 1
    if i >= n or s[i] != "{":
        raise ArrayFormatError(f"not an array literal: {s!r}")
    i += 1
    out: list[str | None] = []
    while i < n and s[i] in _SPACE:
        i += 1
    if i < n and s[i] == "}":
        return out
    while True:
        while i < n and s[i] in _SPACE:
            i += 1
        if i >= n:
            raise ArrayFormatError(f"array literal {s!r} is not closed")
        if s[i] == "{":
            raise NotTypeable(f"array literal {s!r} is multi-dimensional: no Arrow list value")
        buf: list[str] = []
        quoted_any = False
        trailing_ws = 0
        while i < n:
            c = s[i]
            if c == '"':
                quoted_any = True
                i += 1
                while i < n and s[i] != '"':
                    if s[i] == "\\" and i + 1 < n:
                        i += 1
                    buf.append(s[i])
                    i += 1
                i += 1
                trailing_ws = 0
                continue
            if c == "\\" and i + 1 < n:
                buf.append(s[i + 1])
                i += 2
                trailing_ws = 0
                continue
            if c == delim or c == "}":
                break
            if c in _SPACE:
                trailing_ws += 1
            else:
                trailing_ws = 0
            buf.append(c)
            i += 1
        if i >= n:
            raise ArrayFormatError(f"array literal {s!r} is not closed")
        item = "".join(buf[:len(buf) - trailing_ws] if trailing_ws else buf)
        out.append(None if not quoted_any and item.upper() == "NULL" else item)
        if s[i] == "}":
            return out
        i += 1


if not cython.compiled:  # compiled as itself: the compiled module's, where it was built
    parse = native.twin(parse, "cdclake.tuples._arrays")
    text = native.twin(text, "cdclake.tuples._arrays")
