"""jsonb's on-disk container format (utils/jsonb.h) -> jsonb_out text.

A container is a uint32 header (count in the low 28 bits; flags 0x10000000 raw scalar,
0x20000000 object, 0x40000000 array), then one JEntry per child (objects: all keys, then all
values, keys in storage order), then the children's data. A JEntry is a uint32: type in bits
28-30, and in the low 28 bits either the child's length or — every 32nd entry, flagged by the
top bit — the end offset of its data. Numerics and nested containers are int-aligned inside
the data area (their length includes that padding); numerics are whole numeric varlenas.

Output (JsonbToCStringWorker without indent): ``{"k": v, "k2": [1, 2]}`` — ", " between
items, ": " after keys, strings escaped by escape_json, a raw scalar printed bare.
"""

from __future__ import annotations

import struct

from cdclake import native
from cdclake.tuples import numeric

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

_U32 = struct.Struct("<I")


class JsonbFormatError(ValueError):
    """The bytes are not a jsonb container."""


# escape_json: the two-character escapes, other control characters as \u00XX
_ESCAPES = {i: f"\\u{i:04x}" for i in range(0x20)}
_ESCAPES.update({0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t",
                 0x22: '\\"', 0x5C: "\\\\"})
_NEEDS_ESCAPE = frozenset(chr(c) for c in _ESCAPES)


def escape_json(s: str) -> str:
    if _NEEDS_ESCAPE.isdisjoint(s):
        return f'"{s}"'
    return '"' + s.translate(_ESCAPES) + '"'


def text(p: bytes) -> str:
    """jsonb_out of a jsonb payload (the bytes after the varlena header)."""
    mv = memoryview(p)
    out: list[str] = []
    header = _read_u32(mv, 0)
    if header & JB_FSCALAR:
        if header & JB_CMASK != 1 or not header & JB_FARRAY:
            raise JsonbFormatError(f"raw scalar container with header 0x{header:08X}")
        _container(mv, 0, out, scalar=True)
    else:
        _container(mv, 0, out, scalar=False)
    return "".join(out)


def _read_u32(mv: memoryview, off: int) -> int:
    if off + 4 > len(mv):
        raise JsonbFormatError(f"jsonb data cut off at byte {off}")
    return _U32.unpack_from(mv, off)[0]


def _container(mv: memoryview, start: int, out: list[str], scalar: bool = False) -> None:
    header = _read_u32(mv, start)
    count = header & JB_CMASK
    is_object = bool(header & JB_FOBJECT)
    if not is_object and not header & JB_FARRAY:
        raise JsonbFormatError(f"jsonb container header 0x{header:08X} is neither array nor object")
    nentries = count * 2 if is_object else count
    jstart = start + 4
    base = jstart + 4 * nentries  # data area
    if base > len(mv):
        raise JsonbFormatError(f"jsonb container of {count} items is cut off")
    entries = struct.unpack_from(f"<{nentries}I", mv, jstart)
    # (type, offset, length) of each child, offsets relative to base
    spans: list[tuple[int, int, int]] = []
    off = 0
    for je in entries:
        end = je & JENTRY_OFFLENMASK if je & JENTRY_HAS_OFF else off + (je & JENTRY_OFFLENMASK)
        spans.append((je & JENTRY_TYPEMASK, off, end - off))
        off = end
    if base + off > len(mv):
        raise JsonbFormatError("jsonb container data is cut off")
    if scalar:
        _scalar(mv, base, spans[0], out)
        return
    if is_object:
        out.append("{")
        for i in range(count):
            if i:
                out.append(", ")
            ktype, koff, klen = spans[i]
            if ktype != JENTRY_ISSTRING:
                raise JsonbFormatError("jsonb object key is not a string")
            out.append(escape_json(_str(mv, base + koff, klen)))
            out.append(": ")
            _scalar(mv, base, spans[count + i], out)
        out.append("}")
    else:
        out.append("[")
        for i in range(count):
            if i:
                out.append(", ")
            _scalar(mv, base, spans[i], out)
        out.append("]")


def _str(mv: memoryview, off: int, length: int) -> str:
    try:
        return str(mv[off:off + length], "utf-8")
    except UnicodeDecodeError as exc:
        raise JsonbFormatError(f"jsonb string is not valid UTF-8: {exc}") from exc


def _scalar(mv: memoryview, base: int, span: tuple[int, int, int], out: list[str]) -> None:
    jtype, off, length = span
    if jtype == JENTRY_ISSTRING:
        out.append(escape_json(_str(mv, base + off, length)))
    elif jtype == JENTRY_ISNUMERIC:
        start = base + ((off + 3) & ~3)
        raw = bytes(mv[start:base + off + length])
        out.append(numeric.text(_numeric_payload(raw)))
    elif jtype == JENTRY_ISBOOL_TRUE:
        out.append("true")
    elif jtype == JENTRY_ISBOOL_FALSE:
        out.append("false")
    elif jtype == JENTRY_ISNULL:
        out.append("null")
    elif jtype == JENTRY_ISCONTAINER:
        _container(mv, base + ((off + 3) & ~3), out)
    else:
        raise JsonbFormatError(f"unknown jsonb entry type 0x{jtype:08X}")


def _numeric_payload(raw: bytes) -> bytes:
    """A numeric varlena inside jsonb: 4-byte header (or, defensively, a 1-byte one)."""
    if not raw:
        raise JsonbFormatError("jsonb numeric is empty")
    b0 = raw[0]
    if b0 & 1:
        return raw[1:b0 >> 1]
    if len(raw) < 4:
        raise JsonbFormatError("jsonb numeric header cut off")
    size = _U32.unpack_from(raw)[0] >> 2
    if size > len(raw) or size < 4:
        raise JsonbFormatError(f"jsonb numeric of {size} bytes does not fit its entry")
    return raw[4:size]


#: the reference, which the compiled twin falls back to for what it does not take
_python_text = text
text = native.twin(text, "cdclake.tuples._jsonb")
