"""PostgreSQL's own LZ compression (pglz), decompression only.

Used for inline-compressed varlena values, TOAST values, and full-page images logged with
``wal_compression = pglz``. No library implements it, so this follows the format described in
common/pg_lzcompress.c: a control byte announces eight items; a 0 bit is one literal byte, a 1
bit a back-reference of two bytes (length-3 in the low nibble of the first, 12-bit offset) plus
one extension byte when that nibble is 15 (length 18 + the byte).

The format is sequential, so this is a Python loop; it stays lean by copying a whole group of
eight literals (control byte 0, the common case for poorly compressible stretches) as one slice
and back-references as slices of the output.
"""

from __future__ import annotations


class PglzError(ValueError):
    """The compressed stream is not valid pglz, or does not produce the expected size."""


def decompress(src: bytes | bytearray | memoryview, rawsize: int, *,
               check_complete: bool = True) -> bytes:
    """Decompress ``src`` into exactly ``rawsize`` bytes.

    ``check_complete`` (as PostgreSQL passes for datums) requires that the whole input is
    consumed and the output is exactly ``rawsize``; without it, output stops at ``rawsize``.
    """
    if not isinstance(src, bytes):
        src = bytes(src)
    out = bytearray()
    dp = 0  # == len(out)
    sp = 0
    slen = len(src)
    while sp < slen and dp < rawsize:
        ctrl = src[sp]
        sp += 1
        if ctrl == 0 and sp + 8 <= slen and dp + 8 <= rawsize:
            out += src[sp:sp + 8]
            sp += 8
            dp += 8
            continue
        for _ in range(8):
            if sp >= slen or dp >= rawsize:
                break
            if ctrl & 1:
                if sp + 1 >= slen:
                    raise PglzError("pglz: back-reference cut off at end of input")
                b0 = src[sp]
                off = ((b0 & 0xF0) << 4) | src[sp + 1]
                length = (b0 & 0x0F) + 3
                sp += 2
                if length == 18:
                    if sp >= slen:
                        raise PglzError("pglz: length extension cut off at end of input")
                    length += src[sp]
                    sp += 1
                if off == 0 or off > dp:
                    raise PglzError(f"pglz: back-reference offset {off} outside output "
                                    f"(at output byte {dp})")
                if length > rawsize - dp:
                    length = rawsize - dp
                start = dp - off
                if off >= length:
                    out += out[start:start + length]
                else:
                    # Overlapping copy: the referenced run repeats itself.
                    reps, rem = divmod(length, off)
                    chunk = out[start:]
                    out += chunk * reps + chunk[:rem]
                dp += length
            else:
                out.append(src[sp])
                sp += 1
                dp += 1
            ctrl >>= 1
    if check_complete and (dp != rawsize or sp != slen):
        raise PglzError(
            f"pglz: compressed data is corrupt (produced {dp} of {rawsize} bytes, "
            f"consumed {sp} of {slen})"
        )
    if dp < rawsize:
        raise PglzError(f"pglz: produced {dp} of {rawsize} bytes")
    return bytes(out)
