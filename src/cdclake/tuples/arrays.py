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
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from cdclake import native
from cdclake.tuples.untypeable import NotTypeable

_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_ALIGN = {"c": 0, "s": 1, "i": 3, "d": 7}
_SPACE = frozenset(" \t\n\r\v\f")
VARHDRSZ = 4
MAXDIM = 6


class ArrayFormatError(ValueError):
    """The bytes are not an array of the expected element type, or text is no array literal."""


def parse(p: bytes, elem_len: int, elem_align: str,
          elem_oid: int | None = None) -> tuple[list[int], list[int], list[bytes | None]]:
    """(dims, lower bounds, element payloads in row-major order, None for NULL)."""
    n = len(p)
    if n < 12:
        raise ArrayFormatError(f"array of {n} bytes is shorter than its header")
    ndim, dataoffset, elemtype = struct.unpack_from("<iiI", p)
    if ndim == 0:
        return [], [], []
    if ndim < 0 or ndim > MAXDIM:
        raise ArrayFormatError(f"array has {ndim} dimensions")
    if elem_oid is not None and elemtype != elem_oid:
        raise ArrayFormatError(
            f"array element type oid {elemtype} differs from the column's element type "
            f"{elem_oid}")
    if 12 + 8 * ndim > n:
        raise ArrayFormatError("array dimensions are cut off")
    dims = list(struct.unpack_from(f"<{ndim}i", p, 12))
    lbs = list(struct.unpack_from(f"<{ndim}i", p, 12 + 4 * ndim))
    nitems = 1
    for d in dims:
        if d < 0:
            raise ArrayFormatError(f"array dimension {d} is negative")
        nitems *= d
    bitmap_at = 12 + 8 * ndim
    if dataoffset:
        off = dataoffset - VARHDRSZ
        if bitmap_at + (nitems + 7) // 8 > off or off > n:
            raise ArrayFormatError(f"array data offset {dataoffset} is impossible")
        bitmap = p[bitmap_at:bitmap_at + (nitems + 7) // 8]
    else:
        off = ((bitmap_at + VARHDRSZ + 7) & ~7) - VARHDRSZ
        bitmap = b""
    items: list[bytes | None] = []
    append = items.append
    m = _ALIGN.get(elem_align, 0)
    if elem_len > 0:
        stride = (elem_len + m) & ~m
        off = ((off + VARHDRSZ + m) & ~m) - VARHDRSZ
        if not bitmap:
            if off + stride * (nitems - 1) + elem_len > n:
                raise ArrayFormatError(f"array of {nitems} elements is cut off")
            return dims, lbs, [p[o:o + elem_len] for o in range(off, off + stride * nitems,
                                                                  stride)]
        for i in range(nitems):
            if not bitmap[i >> 3] >> (i & 7) & 1:
                append(None)
                continue
            if off + elem_len > n:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            append(p[off:off + elem_len])
            off += stride
        return dims, lbs, items
    for i in range(nitems):
        if bitmap and not bitmap[i >> 3] >> (i & 7) & 1:
            append(None)
            continue
        off = ((off + VARHDRSZ + m) & ~m) - VARHDRSZ
        if off >= n:
            raise ArrayFormatError(f"array element {i + 1} is cut off")
        if elem_len == -1:
            b0 = p[off]
            if b0 & 1:
                if b0 == 1:
                    raise ArrayFormatError(f"array element {i + 1} is an external TOAST pointer")
                size, hdr = b0 >> 1, 1
            else:
                if off + 4 > n:
                    raise ArrayFormatError(f"array element {i + 1} header is cut off")
                word = _U32.unpack_from(p, off)[0]
                if word & 3:
                    raise ArrayFormatError(f"array element {i + 1} is compressed")
                size, hdr = word >> 2, 4
            if size < hdr or off + size > n:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            append(p[off + hdr:off + size])
            off += size
        else:  # cstring
            nul = p.find(b"\x00", off)
            if nul < 0:
                raise ArrayFormatError(f"array element {i + 1} is cut off")
            append(p[off:nul])
            off = nul + 1
    return dims, lbs, items


def text(p: bytes, elem_len: int, elem_align: str, elem_oid: int | None,
         etext: Callable[[bytes], str], delim: str, quote: Callable[[str], str]) -> str:
    """array_out: the array's text, each present element's by ``etext``."""
    dims, lbs, items = parse(p, elem_len, elem_align, elem_oid)
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


#: the reference, which the compiled twin falls back to for what it does not take
_python_text = text
text = native.twin(text, "cdclake.tuples._arrays")
