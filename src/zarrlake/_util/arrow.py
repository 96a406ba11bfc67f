"""pyarrow arrays made from numpy arrays, and numpy arrays read from pyarrow's, through
their buffers: `pa.array`, `pa.scalar` and `Array.to_numpy` import pandas on their first
call in a process where it is installed (0.8-1.7 s), which a statistics table has no use
for. Each function here copies at most once (bit-packing booleans, gathering key bytes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


def column(
    values: np.ndarray, type: pa.DataType | None = None, valid: np.ndarray | None = None
) -> pa.Array:
    """The 1-d `values` as a pyarrow array of `type` (by default the one of their dtype),
    null where `valid` is False; a bool array is bit-packed, any other shares the values'
    memory (in native byte order)."""
    import pyarrow as pa

    values = np.asarray(values)
    if not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    values = np.ascontiguousarray(values)
    if type is None:
        type = pa.from_numpy_dtype(values.dtype)
    n = len(values)
    nulls = 0
    bitmap = None
    if valid is not None:
        nulls = n - int(np.count_nonzero(valid))
        if nulls:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        if values.dtype.itemsize * 8 != type.bit_width:
            raise ValueError(f"{values.dtype} values are not of {type}")
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(type, n, [bitmap, data], null_count=nulls)


def table(columns: dict[str, pa.Array]) -> pa.Table:
    """A table of `columns` in their order (`pa.table` of a dict, without the pandas check)."""
    import pyarrow as pa

    return pa.Table.from_arrays(list(columns.values()), names=list(columns))


def strings(keys: np.ndarray, skip: int = 0) -> pa.Array | None:
    """Fixed-width bytes `keys` (numpy `S<n>`, whose trailing NULs are padding) as a
    pyarrow string array, the first `skip` bytes of each cut off; None if one is not
    UTF-8 there."""
    import pyarrow as pa

    keys = np.ascontiguousarray(keys)
    n = len(keys)
    width = keys.dtype.itemsize
    grid = keys.view(np.uint8).reshape(n, width)[:, skip:]
    lengths = np.maximum(np.strings.str_len(keys).astype(np.int64) - skip, 0)
    data = grid[np.arange(grid.shape[1]) < lengths[:, None]]  # (row by row: C order)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = offsets[-1] >= 2**31
    kind = pa.large_binary() if large else pa.binary()
    offsets = offsets if large else offsets.astype(np.int32)
    raw = pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        return raw.cast(pa.large_string() if large else pa.string())
    except pa.ArrowInvalid:
        return None


_NUMPY = {
    **{f"int{b}": np.dtype(f"i{b // 8}") for b in (8, 16, 32, 64)},
    **{f"uint{b}": np.dtype(f"u{b // 8}") for b in (8, 16, 32, 64)},
    "halffloat": np.dtype(np.float16),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
}
"""numpy's dtype of each pyarrow number type, by its name."""


def to_numpy(column: pa.Array | pa.ChunkedArray, null: object) -> np.ndarray:
    """A pyarrow column of numbers or booleans as a new numpy array of the same type,
    `null` where it is null (`fill_null(...).to_numpy()`, without pyarrow's pandas check)."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n, at = len(array), array.offset
    validity, data = array.buffers()[:2]
    if pa.types.is_boolean(array.type):
        out = _bits(data, at, n)
    else:
        dtype = _NUMPY.get(str(array.type))
        if dtype is None:
            raise TypeError(f"no numpy dtype for pyarrow's {array.type}")
        out = np.zeros(n, dtype) if data is None else np.frombuffer(data, dtype)[at : at + n].copy()
    if array.null_count and validity is not None:
        out[~_bits(validity, at, n)] = null
    return out


def _bits(buffer: pa.Buffer | None, at: int, n: int) -> np.ndarray:
    """`n` bits of a pyarrow bitmap from bit `at`, as bools."""
    if buffer is None:
        return np.zeros(n, bool)
    packed = np.frombuffer(buffer, np.uint8)
    return np.unpackbits(packed, count=at + n, bitorder="little")[at:].astype(bool)


def numbers(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The values of a pyarrow array of fixed-width numbers without nulls, of numpy's
    `dtype`, as numpy's (a view of its buffer)."""
    if array.null_count:
        raise ValueError("an array with nulls has no plain numpy view")
    if np.dtype(dtype).itemsize * 8 != array.type.bit_width:
        raise ValueError(f"{array.type} values are not {np.dtype(dtype)}")
    buffer = array.buffers()[1]
    if buffer is None:
        return np.zeros(0, dtype)
    return np.frombuffer(buffer, dtype)[array.offset : array.offset + len(array)]
