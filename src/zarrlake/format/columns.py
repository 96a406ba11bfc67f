"""A small columnar container: a JSON header plus raw numpy column buffers.

Decoding is zero-copy (`np.frombuffer`), so a manifest of a million entries loads in
milliseconds instead of building a Python object per entry.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from zarrlake.errors import CorruptionError

_LEN = struct.Struct("<I")


def pack(meta: dict[str, Any], columns: dict[str, np.ndarray], prefix: bytes = b"") -> bytes:
    """`prefix`, then the header and the column buffers, copied once into the result."""
    specs = []
    buffers: list[Any] = []
    offset = 0
    for name, arr in columns.items():
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        nbytes = arr.nbytes
        specs.append([name, arr.dtype.str, list(arr.shape), offset, nbytes])
        buffers.append(arr)  # (joined as its bytes: a contiguous array is a buffer)
        offset += nbytes
    header = json.dumps({"meta": meta, "columns": specs}, separators=(",", ":")).encode()
    return b"".join([prefix, _LEN.pack(len(header)), header, *buffers])


def unpack(payload: bytes | memoryview, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The (header meta, named columns) of a `pack`ed payload, without copying the buffers.

    Raises CorruptionError naming `what` when the payload is truncated or malformed."""
    try:
        (hlen,) = _LEN.unpack_from(payload)
        header = json.loads(str(payload[_LEN.size : _LEN.size + hlen], "utf-8"))  # (as text:
        # json.loads of bytes first works out their encoding)
        base = _LEN.size + hlen
        columns = {}
        for name, dtype, shape, offset, nbytes in header["columns"]:
            buf = np.frombuffer(
                payload, dtype=np.dtype(dtype), count=math.prod(shape), offset=base + offset
            )
            if buf.nbytes != nbytes:
                raise ValueError(f"column {name} has {buf.nbytes} bytes, expected {nbytes}")
            columns[name] = buf.reshape(shape)
        return header["meta"], columns
    except (ValueError, KeyError, TypeError, struct.error) as e:
        raise CorruptionError(
            f"{what}: cannot decode ({e}); run `zarrlake fsck` to find every damaged object"
        ) from e


def keys_array(keys: list[bytes]) -> np.ndarray:
    """Byte-string keys as a fixed-width numpy array (sorts and searches bytewise)."""
    width = max((len(k) for k in keys), default=1) or 1
    return np.array(keys, dtype=f"S{width}")
