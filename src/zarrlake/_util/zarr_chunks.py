"""What zarr can make of a chunk's bytes: a cheap check of their frame when a session
writes them (`Settings.check_chunks`), and a full decode (`zarrlake fsck --decode`).

The check reads only the array's codec chain (once per `zarr.json`) and a few header
bytes: the outermost compressor's frame (zstd's magic and declared content size, gzip's
magic and trailing size, blosc's header sizes) and, with no compressor, the exact length
of the chunk's raw bytes. It cannot prove bytes decode; it refuses bytes that cannot.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"
_BLOSC_HEADER = struct.Struct("<BBBBIII")  # version, versionlz, flags, typesize, nbytes,
# blocksize, cbytes
_SIZE_ONLY_ARRAY_CODECS = {"transpose"}  # array -> array codecs that keep the byte count
_TRAILERS = {"crc32c": 4}  # bytes -> bytes codecs that only append this many bytes


@dataclass(frozen=True)
class ChunkFrame:
    """What a chunk's stored bytes must look like: the outermost codec's frame (None: no
    compressor, the bytes are raw) and the byte count it wraps (None: unknown)."""

    outer: str | None
    inner_size: int | None

    def problem(self, data: bytes | memoryview) -> str | None:
        """Why `data` cannot be a chunk of this array, or None if the check passes."""
        size = self.inner_size
        if self.outer is None:
            if size is not None and len(data) != size:
                return f"holds {len(data)} bytes; its uncompressed chunks hold exactly {size}"
            return None
        check = _FRAMES.get(self.outer)
        return None if check is None else check(bytes(data[:32]), data, size)


def _zstd(head: bytes, data: bytes | memoryview, size: int | None) -> str | None:
    if head[:4] != _ZSTD_MAGIC:
        return f"is not a zstd frame (it starts {head[:4].hex()}, not {_ZSTD_MAGIC.hex()})"
    if len(head) < 6:
        return f"is a truncated zstd frame ({len(data)} bytes)"
    fhd = head[4]
    single = (fhd >> 5) & 1
    fcs_len = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if fcs_len == 0 or size is None:
        return None  # the frame does not declare its size
    if len(head) < at + fcs_len:
        return f"is a truncated zstd frame ({len(data)} bytes)"
    declared = int.from_bytes(head[at : at + fcs_len], "little") + (256 if fcs_len == 2 else 0)
    if declared != size:
        return f"is a zstd frame of {declared} bytes; a chunk decodes to {size}"
    return None


def _gzip(head: bytes, data: bytes | memoryview, size: int | None) -> str | None:
    if head[:2] != _GZIP_MAGIC:
        return f"is not a gzip stream (it starts {head[:2].hex()}, not {_GZIP_MAGIC.hex()})"
    if len(data) < 18:
        return f"is a truncated gzip stream ({len(data)} bytes)"
    declared = int.from_bytes(data[-4:], "little")
    if size is not None and declared != size % (1 << 32):
        return f"is a gzip stream of {declared} bytes; a chunk decodes to {size}"
    return None


def _blosc(head: bytes, data: bytes | memoryview, size: int | None) -> str | None:
    if len(head) < _BLOSC_HEADER.size:
        return f"is too short for a blosc frame ({len(data)} bytes)"
    _, _, _, _, nbytes, _, cbytes = _BLOSC_HEADER.unpack_from(head)
    if cbytes != len(data):
        return f"is not a blosc frame (its header says {cbytes} bytes, it holds {len(data)})"
    if size is not None and nbytes != size:
        return f"is a blosc frame of {nbytes} bytes; a chunk decodes to {size}"
    return None


UNCHECKED = ChunkFrame(None, None)
"""The frame of chunks nothing is checked about (no array, or a chain not checked)."""

_FRAMES: dict[str, Callable[[bytes, bytes | memoryview, int | None], str | None]] = {
    "zstd": _zstd,
    "gzip": _gzip,
    "blosc": _blosc,
}


@lru_cache(maxsize=256)
def chunk_frame(doc: bytes) -> ChunkFrame | None:
    """The frame the chunks of the array whose `zarr.json` is `doc` are stored in; None
    when nothing is checked (a sharded array, an unknown codec first, a variable size)."""
    try:
        meta = json.loads(doc)
        codecs = [c if isinstance(c, dict) else {"name": c} for c in meta["codecs"]]
        names = [str(c["name"]) for c in codecs]
        at = next(i for i, c in enumerate(codecs) if _array_to_bytes(c["name"]))
    except (ValueError, KeyError, TypeError, StopIteration):
        return None
    if names[at] != "bytes" or any(n not in _SIZE_ONLY_ARRAY_CODECS for n in names[:at]):
        return None  # sharding, variable-length types, or a codec changing the element size
    size = _raw_size(doc)
    outer = names[at + 1 :]
    if not outer:
        return ChunkFrame(None, size)
    for name in outer[:-1]:
        if name not in _TRAILERS:
            size = None
        elif size is not None:
            size += _TRAILERS[name]
    last = outer[-1]
    if last in _TRAILERS:
        return ChunkFrame(None, None if size is None else size + _TRAILERS[last])
    return ChunkFrame(last, size) if last in _FRAMES else None


def _array_to_bytes(name: str) -> bool:
    """Whether codec `name` turns arrays into bytes (zarr's registry knows each kind)."""
    if name in ("bytes", "sharding_indexed", "vlen-utf8", "vlen-bytes"):
        return True
    from zarr.abc.codec import ArrayBytesCodec
    from zarr.registry import get_codec_class

    try:
        return issubclass(get_codec_class(name), ArrayBytesCodec)
    except (KeyError, ValueError, TypeError):
        return True  # unknown: stop here (nothing after it is checked)


def _raw_size(doc: bytes) -> int | None:
    """The bytes of one chunk as the `bytes` codec lays them out (None if not fixed)."""
    from zarr.core.metadata.v3 import ArrayV3Metadata

    try:
        meta = ArrayV3Metadata.from_dict(json.loads(doc))
        shape = meta.chunk_grid.chunk_shape  # type: ignore[attr-defined]
        itemsize = meta.dtype.to_native_dtype().itemsize
    except Exception:  # an irregular grid, a dtype without a fixed size: not checked
        return None
    if not itemsize or meta.dtype.to_native_dtype().kind == "O":
        return None
    return math.prod(shape) * itemsize


def decode(doc: bytes, suffix: str, coords: tuple[int, ...], data: bytes) -> None:
    """Decode `data` as the chunk at `coords` (stored under `suffix`, its key within the
    array) of the array whose `zarr.json` is `doc`, as a read by zarr would: zarr opens the
    array on a memory store holding only these bytes. Raises the codec's own exception if
    they do not decode. Thread-safe: each thread opens its own copy of the array."""
    from zarr.core.buffer import default_buffer_prototype

    held, array = _opened(doc)
    held.clear()
    held["zarr.json"] = default_buffer_prototype().buffer.from_bytes(doc)
    held[suffix] = default_buffer_prototype().buffer.from_bytes(data)
    array.get_block_selection(coords)


_LOCAL = threading.local()


def _opened(doc: bytes) -> tuple[dict[str, Any], Any]:
    """(the store's contents, the array) of this thread's copy of the array of `doc`."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    cache: dict[bytes, tuple[dict[str, Any], Any]] = _LOCAL.__dict__.setdefault("arrays", {})
    got = cache.get(doc)
    if got is None:
        held: dict[str, Any] = {"zarr.json": default_buffer_prototype().buffer.from_bytes(doc)}
        if len(cache) >= 16:
            cache.clear()
        got = cache[doc] = (held, zarr.open_array(MemoryStore(held), mode="r"))
    return got


@lru_cache(maxsize=64)
def inner_doc(doc: bytes) -> bytes | None:
    """For an array with a sharding codec: a `zarr.json` of one inner chunk as an array of
    its own (the inner chunk shape and codecs), so an inner chunk zarrlake stores apart
    from its shard decodes like a chunk; None for other arrays."""
    try:
        meta = json.loads(doc)
        codecs = meta["codecs"]
        shard = next(c for c in codecs if isinstance(c, dict) and c["name"] == "sharding_indexed")
        config = shard["configuration"]
        inner = list(config["chunk_shape"])
        own = {
            **meta,
            "shape": inner,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": inner}},
            "codecs": config["codecs"],
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        }
    except (ValueError, KeyError, TypeError, StopIteration):
        return None
    return json.dumps(own).encode()
