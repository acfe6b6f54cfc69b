"""zstd for archived segments (``wal/<name>.zst``).

A segment's unused tail is zeros after an XLOG_SWITCH, so zstd often shrinks it many times
over. Identity stays with the uncompressed bytes: the manifest's sha256 is of the segment, so
the same segment archived plain by one pusher and compressed by another is not a conflict.
zstandard is imported here only, so uncompressed pushes do not load it.
"""

from __future__ import annotations

from cdclake.errors import WalCorruptError

#: No segment is larger than 1 GiB (PostgreSQL's maximum wal_segment_size).
MAX_SEGMENT_BYTES = 1 << 30


def compress(data: bytes, level: int = 3) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)


def decompress(data: bytes, where: str) -> bytes:
    """Inflate one zstd frame; ``where`` names the object. Raises WalCorruptError."""
    import zstandard

    try:
        size = zstandard.frame_content_size(data)
        if size > MAX_SEGMENT_BYTES:
            raise WalCorruptError(f"zstd frame claims {size} bytes, more than any segment",
                                  segment=where)
        out = zstandard.ZstdDecompressor().decompress(data, max_output_size=MAX_SEGMENT_BYTES)
    except zstandard.ZstdError as exc:
        raise WalCorruptError(f"not a valid zstd-compressed segment: {exc}", segment=where) \
            from exc
    return bytes(out)
