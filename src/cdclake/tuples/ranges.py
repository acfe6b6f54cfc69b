"""Range types on disk (utils/rangetypes.h) -> range_out text.

After the varlena header: oid rangetypid, the lower bound (if present), the upper bound
(aligned to the subtype's typalign unless it is a short varlena), and a flags byte as the
datum's last byte: 0x01 empty, 0x02 lower inclusive, 0x04 upper inclusive, 0x08 lower
infinite, 0x10 upper infinite (0x20/0x40 null bounds, unused). Bound varlenas may have short
headers; alignment counts from the start of the 4-byte header.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

RANGE_EMPTY = 0x01
RANGE_LB_INC = 0x02
RANGE_UB_INC = 0x04
RANGE_LB_INF = 0x08
RANGE_UB_INF = 0x10
RANGE_LB_NULL = 0x20
RANGE_UB_NULL = 0x40

_ALIGN = {"c": 0, "s": 1, "i": 3, "d": 7}
_U32 = struct.Struct("<I")
_NEEDS_QUOTE = re.compile('["\\\\()\\[\\], \t\n\v\f\r]').search


class RangeFormatError(ValueError):
    """The bytes are not a range of the expected subtype."""


def _bound(p: bytes, off: int, typlen: int, m: int, end: int,
           aligned: bool) -> tuple[bytes, int]:
    """(bound payload, offset after it); ``off`` counts from the payload start."""
    if typlen > 0:
        if aligned:
            off = ((off + 4 + m) & ~m) - 4
        nxt = off + typlen
        if nxt > end:
            raise RangeFormatError("range bound is cut off")
        return p[off:nxt], nxt
    if typlen == -1:
        if off >= end:
            raise RangeFormatError("range bound is cut off")
        if aligned and p[off] == 0:
            off = ((off + 4 + m) & ~m) - 4
        b0 = p[off]
        if b0 & 1:
            if b0 == 1:
                raise RangeFormatError("range bound is an external TOAST pointer")
            size, hdr = b0 >> 1, 1
        else:
            if b0 & 2:
                raise RangeFormatError("range bound is compressed")
            size, hdr = _U32.unpack_from(p, off)[0] >> 2, 4
        if off + size > end or size < hdr:
            raise RangeFormatError("range bound is cut off")
        return p[off + hdr:off + size], off + size
    nul = p.find(b"\x00", off, end)
    if nul < 0:
        raise RangeFormatError("range bound is cut off")
    return p[off:nul], nul + 1


def parse(p: bytes, typlen: int, typalign: str) -> tuple[int, bytes | None, bytes | None]:
    """(flags, lower bound payload, upper bound payload); absent bounds are None."""
    if len(p) < 5:
        raise RangeFormatError(f"range of {len(p)} bytes is too short")
    end = len(p) - 1
    flags = p[end]
    m = _ALIGN.get(typalign, 0)
    off = 4
    lower = upper = None
    if not flags & (RANGE_EMPTY | RANGE_LB_NULL | RANGE_LB_INF):
        lower, off = _bound(p, off, typlen, m, end, aligned=False)
    if not flags & (RANGE_EMPTY | RANGE_UB_NULL | RANGE_UB_INF):
        upper, off = _bound(p, off, typlen, m, end, aligned=True)
    return flags, lower, upper


def escape_bound(s: str) -> str:
    """range_bound_escape: quote empty strings and those with special characters; quotes and
    backslashes are doubled (not backslash-escaped as in arrays)."""
    if s and _NEEDS_QUOTE(s) is None:
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '""') + '"'


def format_text(flags: int, lower: str | None, upper: str | None) -> str:
    """range_deparse: 'empty' or '[lo,hi)' with escaped bounds, blank for infinite ones."""
    if flags & RANGE_EMPTY:
        return "empty"
    return "".join((
        "[" if flags & RANGE_LB_INC else "(",
        "" if lower is None else escape_bound(lower),
        ",",
        "" if upper is None else escape_bound(upper),
        "]" if flags & RANGE_UB_INC else ")",
    ))


def text_function(sub_text: Callable[[bytes], str], typlen: int,
                  typalign: str) -> Callable[[bytes], str]:
    """range_out for a subtype whose output function is ``sub_text``."""
    def text(p: bytes) -> str:
        flags, lower, upper = parse(p, typlen, typalign)
        return format_text(flags,
                           None if lower is None else sub_text(lower),
                           None if upper is None else sub_text(upper))

    return text
