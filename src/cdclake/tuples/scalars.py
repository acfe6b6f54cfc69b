"""Output functions of the simple scalar types: each a pure function over the payload bytes.

Facts from utils/adt: boolout prints t/f; oid/xid/cid are unsigned; charout escapes a
high-bit byte as a backslash and three octal digits and prints NUL as the empty string;
byteaout (bytea_output hex) is ``\\x`` + lowercase hex; varbit_out prints bit_len bits from
the most significant; uuid_out lowercase 8-4-4-4-12; pg_lsn ``%X/%X``; tid ``(block,offset)``;
cash_out with lc_monetary C: ``$`` before, ``-`` for negatives, ``,`` every three digits,
``.`` and two fraction digits. xid8 is unsigned 64-bit: as a long (Iceberg has no unsigned
type) up to 2**63 - 1, every larger value (never a real transaction id: its epoch would be
past 2**31) without a typed value.
"""

from __future__ import annotations

import struct

from cdclake.tuples.untypeable import NotTypeable

_I16 = struct.Struct("<h")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_LSN = struct.Struct("<II")  # XLogRecPtr is a uint64: low word first on little-endian
_TID = struct.Struct("<HHH")


class ScalarFormatError(ValueError):
    """The bytes (or text) are not a value of the type."""


def bool_text(p: bytes) -> str:
    return "t" if p[0] else "f"


def bool_value(p: bytes) -> bool:
    return bool(p[0])


def bool_from_text(s: str) -> bool:
    if s in ("t", "true"):
        return True
    if s in ("f", "false"):
        return False
    raise ScalarFormatError(f"not a boolean output: {s!r}")


def int2_value(p: bytes) -> int:
    return _I16.unpack(p)[0]


def int4_value(p: bytes) -> int:
    return _I32.unpack(p)[0]


def int8_value(p: bytes) -> int:
    return _I64.unpack(p)[0]


def uint4_value(p: bytes) -> int:
    return _U32.unpack(p)[0]


#: the largest xid8 a long holds
_INT64_MAX = (1 << 63) - 1


def xid8_value(p: bytes) -> int:
    return _long(_U64.unpack(p)[0])


def xid8_from_text(s: str) -> int:
    return _long(int(s))


def _long(v: int) -> int:
    if v > _INT64_MAX:
        raise NotTypeable(f"xid8 {v} is past the largest long")
    return v


def int2_text(p: bytes) -> str:
    return str(_I16.unpack(p)[0])


def int4_text(p: bytes) -> str:
    return str(_I32.unpack(p)[0])


def int8_text(p: bytes) -> str:
    return str(_I64.unpack(p)[0])


def uint4_text(p: bytes) -> str:
    return str(_U32.unpack(p)[0])


def uint8_text(p: bytes) -> str:
    return str(_U64.unpack(p)[0])


def utf8_text(p: bytes) -> str:
    return str(p, "utf-8")


def name_text(p: bytes) -> str:
    """nameout: the NUL-padded NAMEDATALEN bytes up to the first NUL."""
    nul = p.find(b"\x00")
    return str(p if nul < 0 else p[:nul], "utf-8")


def char_text(p: bytes) -> str:
    """charout: one byte; NUL prints nothing, a high-bit byte as \\ooo (octal)."""
    c = p[0]
    if c & 0x80:
        return f"\\{c >> 6}{(c >> 3) & 7}{c & 7}"
    return chr(c) if c else ""


def bytea_text(p: bytes) -> str:
    return "\\x" + p.hex()


def bytea_value(p: bytes) -> bytes:
    return bytes(p)


def bytea_from_text(s: str) -> bytes:
    if not s.startswith("\\x"):
        raise ScalarFormatError(f"not a hex bytea output: {s[:20]!r}")
    return bytes.fromhex(s[2:])


def uuid_text(p: bytes) -> str:
    h = p.hex()
    if len(h) != 32:
        raise ScalarFormatError(f"uuid of {len(p)} bytes")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuid_value(p: bytes) -> bytes:
    if len(p) != 16:
        raise ScalarFormatError(f"uuid of {len(p)} bytes")
    return bytes(p)


def uuid_from_text(s: str) -> bytes:
    b = bytes.fromhex(s.replace("-", ""))
    if len(b) != 16:
        raise ScalarFormatError(f"not a uuid output: {s!r}")
    return b


def bits_text(p: bytes) -> str:
    """varbit_out (bit and varbit): int32 bit length, then the bits, most significant first."""
    nbits = _I32.unpack_from(p)[0]
    nbytes = (nbits + 7) >> 3
    if nbits < 0 or 4 + nbytes > len(p):
        raise ScalarFormatError(f"bit string of {nbits} bits in {len(p) - 4} bytes")
    if nbits == 0:
        return ""
    n = int.from_bytes(p[4:4 + nbytes], "big") >> (nbytes * 8 - nbits)
    return format(n, f"0{nbits}b")


def money_text(p: bytes) -> str:
    """cash_out under lc_monetary C (frac_digits and symbols fall back to $ , . 2)."""
    v = _I64.unpack(p)[0]
    units, cents = divmod(abs(v), 100)
    return f"{'-' if v < 0 else ''}${units:,}.{cents:02d}"


def pg_lsn_text(p: bytes) -> str:
    lo, hi = _LSN.unpack(p)
    return f"{hi:X}/{lo:X}"


def tid_text(p: bytes) -> str:
    hi, lo, off = _TID.unpack(p)
    return f"({hi << 16 | lo},{off})"


def xml_text(p: bytes) -> str:
    """xml_out: the stored text, with an XML declaration rewritten as PostgreSQL does.

    The declaration is dropped unless it has a version other than 1.0 or a standalone
    clause (then it is reprinted without the encoding); when dropped, one newline right after
    it goes too. A declaration that does not parse leaves the text as stored.
    """
    s = str(p, "utf-8")
    decl = _parse_xml_decl(s)
    if decl is None:
        return s
    length, version, standalone = decl
    if (version is not None and version != "1.0") or standalone is not None:
        head = f'<?xml version="{version or "1.0"}"'
        if standalone is not None:
            head += f' standalone="{standalone}"'
        return head + "?>" + s[length:]
    if s[length:length + 1] == "\n":
        length += 1
    return s[length:]


_XML_BLANK = " \t\n\r"


def _parse_xml_decl(s: str) -> tuple[int, str | None, str | None] | None:
    """parse_xml_decl: (length of the declaration, version, standalone) or None if invalid."""
    if not s.startswith("<?xml"):
        return 0, None, None
    nxt = s[5:6]
    if nxt and (nxt.isalnum() or nxt in ".-_:" or (ord(nxt) > 127 and nxt.isalpha())):
        return 0, None, None  # a processing instruction such as <?xml-stylesheet ...?>
    i = 5
    n = len(s)

    def skip(i: int) -> int:
        while i < n and s[i] in _XML_BLANK:
            i += 1
        return i

    def quoted(i: int) -> tuple[str, int] | None:
        if i < n and s[i] in "'\"":
            q = s.find(s[i], i + 1)
            if q < 0:
                return None
            return s[i + 1:q], q + 1
        return None

    if i >= n or s[i] not in _XML_BLANK:
        return None
    i = skip(i)
    if not s.startswith("version", i):
        return None
    i = skip(i + 7)
    if s[i:i + 1] != "=":
        return None
    got = quoted(skip(i + 1))
    if got is None:
        return None
    version, i = got
    save = i
    j = skip(i)
    if s.startswith("encoding", j):
        if save >= n or s[save] not in _XML_BLANK:
            return None
        j = skip(j + 8)
        if s[j:j + 1] != "=":
            return None
        got = quoted(skip(j + 1))
        if got is None:
            return None
        i = got[1]
    save = i
    j = skip(i)
    standalone: str | None = None
    if s.startswith("standalone", j):
        if save >= n or s[save] not in _XML_BLANK:
            return None
        j = skip(j + 10)
        if s[j:j + 1] != "=":
            return None
        j = skip(j + 1)
        if s[j:j + 5] in ("'yes'", '"yes"'):
            standalone, i = "yes", j + 5
        elif s[j:j + 4] in ("'no'", '"no"'):
            standalone, i = "no", j + 4
        else:
            return None
    i = skip(i)
    if not s.startswith("?>", i):
        return None
    i += 2
    if any(ord(c) > 127 for c in s[:i]):
        return None
    return i, version, standalone
