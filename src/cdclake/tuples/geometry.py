"""Geometric types (utils/geo_decls.h, geo_ops.c) -> their text output.

Every coordinate prints with float8out (shortest round-trip digits). Layouts: point (x, y);
lseg two points; box high then low corner; line A, B, C; circle center then radius; path
(varlena) int32 npts, int32 closed, int32 padding, points; polygon (varlena) int32 npts, a
bounding box, points.
"""

from __future__ import annotations

import struct

from cdclake.tuples.floats import float8_text

_I32 = struct.Struct("<i")


class GeometryFormatError(ValueError):
    """The bytes are not the expected geometric datum."""


def _doubles(p: bytes, n: int, off: int = 0) -> tuple[float, ...]:
    if off + 8 * n > len(p):
        raise GeometryFormatError(f"geometric datum of {len(p)} bytes is cut off")
    return struct.unpack_from(f"<{n}d", p, off)


def _pairs(vals: tuple[float, ...]) -> list[str]:
    return [f"({float8_text(vals[i])},{float8_text(vals[i + 1])})"
            for i in range(0, len(vals), 2)]


def point_text(p: bytes) -> str:
    return _pairs(_doubles(p, 2))[0]


def lseg_text(p: bytes) -> str:
    return "[" + ",".join(_pairs(_doubles(p, 4))) + "]"


def box_text(p: bytes) -> str:
    return ",".join(_pairs(_doubles(p, 4)))


def line_text(p: bytes) -> str:
    return "{" + ",".join(float8_text(v) for v in _doubles(p, 3)) + "}"


def circle_text(p: bytes) -> str:
    x, y, r = _doubles(p, 3)
    return f"<({float8_text(x)},{float8_text(y)}),{float8_text(r)}>"


def path_text(p: bytes) -> str:
    if len(p) < 12:
        raise GeometryFormatError(f"path datum of {len(p)} bytes is cut off")
    npts, closed = struct.unpack_from("<ii", p)
    pts = ",".join(_pairs(_doubles(p, 2 * npts, 12)))
    return f"({pts})" if closed else f"[{pts}]"


def polygon_text(p: bytes) -> str:
    if len(p) < 4:
        raise GeometryFormatError(f"polygon datum of {len(p)} bytes is cut off")
    npts = _I32.unpack_from(p)[0]
    return "(" + ",".join(_pairs(_doubles(p, 2 * npts, 36))) + ")"
