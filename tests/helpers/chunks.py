"""Chunk bytes as zarr stores them for an array with its default codecs (`bytes`, then
zstd at level 0): what a test that writes a chunk's bytes itself must give, now that a
write of bytes the array's codecs cannot decode is refused (`Settings.check_chunks`)."""

from __future__ import annotations

from numcodecs import Zstd


def zstd_chunk(raw: bytes) -> bytes:
    """`raw` (the chunk's values, as the `bytes` codec lays them out) compressed as zarr's
    default compressor does."""
    return bytes(Zstd(level=0).encode(raw))
