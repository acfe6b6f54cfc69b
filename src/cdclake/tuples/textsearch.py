"""tsvector on disk (tsearch/ts_type.h) -> tsvectorout text.

After the varlena header: int32 count, then one uint32 WordEntry per lexeme (bit 0 haspos,
bits 1-11 length, bits 12-31 offset into the lexeme area), then the lexeme area. A lexeme with
positions is followed, at the next even offset, by uint16 npos and npos uint16 positions
(weight in the top 2 bits: 3 A, 2 B, 1 C, 0 D which prints nothing).

Output: ``'lexeme':1A,2 'other'`` — single quotes doubled and backslashes doubled inside.
"""

from __future__ import annotations

import struct

_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_WEIGHTS = ("", "C", "B", "A")


class TsvectorFormatError(ValueError):
    """The bytes are not a tsvector."""


def tsvector_text(p: bytes) -> str:
    if len(p) < 4:
        raise TsvectorFormatError(f"tsvector of {len(p)} bytes has no count")
    size = _I32.unpack_from(p)[0]
    strbase = 4 + 4 * size
    if size < 0 or strbase > len(p):
        raise TsvectorFormatError(f"tsvector of {len(p)} bytes cannot hold {size} entries")
    entries = struct.unpack_from(f"<{size}I", p, 4)
    out: list[str] = []
    for w in entries:
        length = (w >> 1) & 0x7FF
        pos = w >> 12
        start = strbase + pos
        if start + length > len(p):
            raise TsvectorFormatError("tsvector lexeme is cut off")
        lexeme = p[start:start + length].decode("utf-8")
        s = "'" + lexeme.replace("'", "''").replace("\\", "\\\\") + "'"
        if w & 1:
            at = strbase + ((pos + length + 1) & ~1)
            if at + 2 > len(p):
                raise TsvectorFormatError("tsvector positions are cut off")
            npos = _U16.unpack_from(p, at)[0]
            if npos:
                if at + 2 + 2 * npos > len(p):
                    raise TsvectorFormatError("tsvector positions are cut off")
                positions = struct.unpack_from(f"<{npos}H", p, at + 2)
                s += ":" + ",".join(f"{x & 0x3FFF}{_WEIGHTS[x >> 14]}" for x in positions)
        out.append(s)
    return " ".join(out)
