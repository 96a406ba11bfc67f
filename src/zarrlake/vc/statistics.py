"""Per-chunk value statistics: computing them from values with numpy (the writer does, from
the values it encodes), and reading an array's from the manifests of a snapshot.

Statistics describe a chunk as stored: every element of its chunk shape as decoded,
including, at the array's upper edges, the part beyond the array's shape (zarr fills it
with the fill value when it writes the chunk). So they stay true whatever the array's
shape becomes, and for a chunk at an edge they may cover more than the elements inside
the array. A chunk absent from the manifests is all fill value; its statistics are those
of a chunk of fill values. A sharded array has statistics per inner chunk, on the grid of
inner chunks; a shard stored whole has none (its inner chunks read as unknown).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, SupportsFloat, cast

import numpy as np

from zarrlake._util import arrow
from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.format import statistics as sf
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import SEP, inner_key
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.format.statistics import STATS, ChunkStats
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.objects import Objects
from zarrlake.vc.snapshot_view import SnapshotView

if TYPE_CHECKING:
    import pyarrow as pa

STAT_COLUMNS = ("count", "nan_count", "fill_count", "min", "max", "sum", "known")
"""The columns of a statistics table after the coordinates."""


_KINDS = {"f": sf.FLOAT, "i": sf.INT, "u": sf.UINT, "b": sf.BOOL}


def kind_of(dtype: np.dtype) -> int:
    """The statistics kind of values of `dtype` (UNKNOWN: no statistics for it)."""
    return _KINDS.get(dtype.kind, sf.UNKNOWN)


def _is_nan(fill: object) -> bool:
    return isinstance(fill, float | np.floating) and math.isnan(fill)


# computing ------------------------------------------------------------------------------


def of_blocks(blocks: np.ndarray, fill: object) -> np.ndarray:
    """The records (format/statistics.py) of each row of `blocks`, a (chunks, elements)
    array of chunks' values; `fill`, the array's fill value. Vectorised over the rows: a
    row without NaN costs a min, a max and a float64 sum (the fill value is counted only
    in rows whose range holds it)."""
    n, size = blocks.shape
    out = np.zeros(n, STATS)
    kind = kind_of(blocks.dtype)
    if kind == sf.UNKNOWN or n == 0 or size == 0:
        return out
    out["kind"] = kind
    out["count"] = size
    if kind == sf.BOOL:
        ones = np.count_nonzero(blocks, axis=1)
        out["min"] = ones == size
        out["max"] = ones > 0
        out["sum"] = ones
        out["fill"] = ones if fill else size - ones
        return out
    lo, hi = blocks.min(axis=1), blocks.max(axis=1)
    if kind == sf.FLOAT:
        lo, hi = lo.astype(np.float64), hi.astype(np.float64)
        gaps = np.flatnonzero(np.isnan(lo) | np.isnan(hi))  # rows holding NaN
        total = _row_sums(blocks) if not len(gaps) else np.empty(n)
        if len(gaps):
            full = np.ones(n, bool)
            full[gaps] = False
            total[full] = _row_sums(blocks[full])
            sub = blocks[gaps]
            nans = np.isnan(sub)
            out["nan"][gaps] = nans.sum(axis=1)
            lo[gaps] = np.fmin.reduce(sub, axis=1)
            hi[gaps] = np.fmax.reduce(sub, axis=1)
            total[gaps] = _row_sums(_zero_nan(sub, nans))
        out["sum"] = total
    else:
        out["sum"] = _row_sums(blocks)
    out["min"] = sf.bits(kind, lo)
    out["max"] = sf.bits(kind, hi)
    if _is_nan(fill):
        out["fill"] = out["nan"]
    elif fill is not None:
        with np.errstate(invalid="ignore"):
            rows = np.flatnonzero((lo <= fill) & (fill <= hi))
        if len(rows):
            out["fill"][rows] = np.count_nonzero(blocks[rows] == fill, axis=1)
    return out


def of_chunk(values: np.ndarray, fill: object) -> ChunkStats | None:
    """The statistics of one chunk's values (None: not a numeric or boolean dtype), equal
    to `of_blocks`' for one row, with a handful of numpy calls: a min, a max and a float64
    sum when there is no NaN (a 1 KiB chunk costs the calls, not the values: the numpy
    functions are bound once, the record made without the named tuple's keyword
    parsing). NaN are looked for only when the min or the max is NaN (NaN propagates
    through both)."""
    kind = _KINDS.get(values.dtype.kind, sf.UNKNOWN)
    v = values.ravel()  # (a view of a contiguous chunk, as reshape(-1) gives, for half the call)
    size = v.size
    if kind == sf.UNKNOWN or size == 0:
        return None
    if kind == sf.BOOL:
        ones = int(_count(v))
        empty = size - ones
        return as_stats(
            (kind, size, 0, ones if fill else empty, int(not empty), int(ones > 0), float(ones))
        )
    lo, hi = _min(v), _max(v)
    nan = 0
    if kind == sf.FLOAT and (lo != lo or hi != hi):
        gaps = np.isnan(v)
        nan = int(_count(gaps))
        lo, hi = np.fmin.reduce(v), np.fmax.reduce(v)
        total = _sum(_zero_nan(v, gaps))
    else:
        total = _sum(v)
    if _is_nan(fill):
        fills = nan
    elif fill is not None and lo <= fill <= hi:
        fills = int(_count(v == fill))
    else:
        fills = 0
    if kind == sf.FLOAT:
        low, high = _BITS2.unpack(_F642.pack(lo, hi))
    else:  # (an int64's two's complement bits; a uint64 as it is)
        low, high = int(lo) & _U64, int(hi) & _U64
    return as_stats((kind, size, nan, fills, low, high, total))


_min, _max, _add, _count = np.minimum.reduce, np.maximum.reduce, np.add.reduce, np.count_nonzero


def as_stats(fields: tuple) -> ChunkStats:
    """A ChunkStats of its seven fields (`of_tiles`' records), made as the tuple it is (the
    named tuple's `__new__` parses keywords: a tenth of a small chunk's statistics)."""
    return tuple.__new__(ChunkStats, fields)


def _zero_nan(values: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """A copy of float `values` with 0 where `gaps` (their NaN) is set, made on the bits
    without a branch per element: a masked copy (`np.where`, `copyto(where=)`) guesses
    wrong at each scattered NaN and took 0.7 ms for 1 MiB with 30% NaN, this 0.05."""
    bits = np.dtype(f"u{values.dtype.itemsize}")
    out = gaps.astype(bits)
    out -= 1  # all ones where a value is a number, 0 where it is NaN
    out &= values.view(bits)
    return out.view(values.dtype)


SUM_BLOCKED = 16384
"""Values from which a sum is taken by `np.einsum` (float64, in blocks of numpy's buffer
size) rather than by numpy's pairwise sum of the values widened to float64 first: a
quarter less time for 1 MiB of float32, the widening copy costing more than the sum."""


def _sum(v: np.ndarray) -> float:
    """The float64 sum of the 1-d `v` (numbers, no NaN)."""
    if v.size >= SUM_BLOCKED:
        return float(np.einsum("i->", v, dtype=np.float64))
    return float(_add(v if v.dtype == np.float64 else v.astype(np.float64)))


def _row_sums(blocks: np.ndarray) -> np.ndarray:
    """The float64 sum of each row of `blocks`, as `_sum` takes it (the same bits)."""
    if blocks.shape[1] >= SUM_BLOCKED:
        return np.array([_sum(row) for row in blocks], np.float64)
    if (
        blocks.dtype != np.float64
        and blocks.flags.c_contiguous
        and blocks.shape[1] <= np.getbufsize()
    ):  # numpy widens a buffer of whole rows at a time and sums each row pairwise, as
        # `_sum` does (a longer row would be summed a buffer at a time: other bits): no
        # float64 copy of the slab (8 MiB at TILES_SLAB, its fresh pages faulted in)
        return np.add.reduce(blocks, axis=1, dtype=np.float64)
    return np.add.reduce(blocks.astype(np.float64), axis=1)


_F642, _BITS2 = struct.Struct("<2d"), struct.Struct("<2Q")
"""A float min and max as the record's bits: packed as float64, read as uint64."""
_U64 = 2**64 - 1


def of_inner(shard: np.ndarray, inner: Sequence[int], fill: object) -> np.ndarray:
    """The records of each inner chunk (of shape `inner`) of a shard's values, in C order
    of the shard's grid of inner chunks."""
    grid = [s // c for s, c in zip(shard.shape, inner, strict=True)]
    split = shard.reshape([x for g, c in zip(grid, inner, strict=True) for x in (g, c)])
    nd = len(grid)
    blocks = split.transpose([*range(0, 2 * nd, 2), *range(1, 2 * nd, 2)])
    return of_blocks(blocks.reshape(math.prod(grid), math.prod(inner)), fill)


TILES_MAX = SUM_BLOCKED
"""Elements per chunk below which a write's chunks get their statistics together
(`of_tiles`): a small chunk costs its numpy calls, not its values; a larger one is taken
alone (`of_chunk`), while its values are in the CPU's caches."""
TILES_SLAB = 1 << 20
"""Elements `of_tiles` takes at a time (its float64 sums copy them: a few MiB, not the
write's size)."""


def of_tiles(
    values: np.ndarray, chunk: Sequence[int], starts: np.ndarray, fill: object
) -> list[tuple] | None:
    """The statistics of the `chunk`-shaped blocks of `values` that start at `starts` (an
    (n, ndim) array of indices into `values`; they are `of_chunk`'s of each block, bit for
    bit), a reduction per statistic over a slab of blocks at a time instead of a handful
    of numpy calls per block. Each is the plain tuple of a ChunkStats' fields (`as_stats`
    makes it one): the garbage collector stops tracking a plain tuple of numbers, so a
    write's many held for a while cost it nothing. None when the blocks are not on one
    grid or do not fill most of the box they span (take each alone then)."""
    if kind_of(values.dtype) == sf.UNKNOWN or not len(starts):
        return None
    shape = np.asarray(chunk, np.int64)
    lo = starts.min(axis=0)
    hi = starts.max(axis=0) + shape
    if (lo < 0).any() or (hi > values.shape).any() or ((starts - lo) % shape).any():
        return None
    grid = (hi - lo) // shape
    total = math.prod(grid.tolist())
    if total > 2 * len(starts):  # sparse: most of the box would be reduced for nothing
        return None
    box = values[tuple(slice(a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True))]
    per_slab = math.prod(grid[1:].tolist()) * math.prod(chunk)  # elements per grid row
    rows = max(1, TILES_SLAB // per_slab)
    chunk0 = int(chunk[0])
    parts = [
        of_inner(box[at * chunk0 : (at + rows) * chunk0], chunk, fill)
        for at in range(0, int(grid[0]), rows)
    ]
    records = parts[0] if len(parts) == 1 else np.concatenate(parts)
    at = np.ravel_multi_index(tuple(((starts - lo) // shape).T), tuple(grid.tolist()))
    return _fields(records[at])


def of_rows(blocks: Sequence[np.ndarray] | np.ndarray, fill: object) -> list[tuple] | None:
    """The statistics of each of `blocks` (chunks' values of one dtype and element count,
    each as the writer holds it, or the rows of one 2-d array), as `of_tiles` gives them
    (`of_chunk`'s bit for bit): the blocks are laid in rows a slab at a time and reduced
    per statistic. None when they are not of one dtype and size."""
    if not len(blocks):
        return []
    dtype, size = blocks[0].dtype, blocks[0].size
    if kind_of(dtype) == sf.UNKNOWN or size == 0:
        return None
    laid = isinstance(blocks, np.ndarray) and blocks.ndim == 2
    if not laid and any(b.dtype != dtype or b.size != size for b in blocks):
        return None
    rows = max(1, TILES_SLAB // size)
    parts = [
        of_blocks(
            blocks[at : at + rows]  # type: ignore[arg-type]
            if laid
            else np.stack([b.reshape(-1) for b in blocks[at : at + rows]]),
            fill,
        )
        for at in range(0, len(blocks), rows)
    ]
    return _fields(parts[0] if len(parts) == 1 else np.concatenate(parts))


def _fields(records: np.ndarray) -> list[tuple]:
    """Records as plain tuples of a ChunkStats' fields (see `of_tiles`)."""
    columns = [records[f].tolist() for f in sf.FIELDS]  # (a fifth less than rows' tolist)
    return list(zip(*columns, strict=True))


def decoded_together(doc: bytes, chunks: Sequence[bytes | memoryview]) -> list[tuple | None]:
    """The statistics of chunk bytes `chunks` of the array whose `zarr.json` is `doc`
    (`decoded_stats` of each, bit for bit), as plain tuples of their fields (`of_tiles`;
    `as_stats` makes each one), decoded one by one and, for chunks of fewer than TILES_MAX
    elements, taken together (`of_rows`); None for bytes that do not decode here. Chunks
    stored as raw values (codec `bytes` only) are read as one array."""
    found = _decoder(doc, False)
    if found is None:
        return [None] * len(chunks)
    small = found.size < TILES_MAX and len(chunks) > 1
    width = None if found.raw is None else found.raw.itemsize * found.size
    if width is not None and all(len(c) == width for c in chunks):
        laid = np.frombuffer(b"".join(chunks), found.raw).reshape(len(chunks), found.size)
        taken = of_rows(laid, found.fill) if small else None
        if taken is not None:
            return taken  # type: ignore[return-value]
        values: list[np.ndarray | None] = list(laid)
    else:
        values = [decode(doc, c) for c in chunks]
    out: list[tuple | None] = [None] * len(chunks)
    whole = [i for i, v in enumerate(values) if v is not None]
    taken = of_rows([values[i] for i in whole], found.fill) if small else None  # type: ignore[misc]
    for n, i in enumerate(whole):
        out[i] = taken[n] if taken is not None else of_chunk(values[i], found.fill)  # type: ignore[arg-type]
    return out


def of_fill(kind: int, fill: object, size: int) -> np.ndarray:
    """The record of a chunk of `size` elements all equal to the fill value (one absent
    from the manifests)."""
    out = np.zeros(1, STATS)
    if kind == sf.UNKNOWN:
        return out
    nan = _is_nan(fill)
    value = np.float64(cast("SupportsFloat | str", fill)) if kind == sf.FLOAT else fill
    out["kind"] = kind
    out["count"] = size
    out["nan"] = size if nan else 0
    out["fill"] = size
    out["min"] = out["max"] = sf.bits(kind, np.array([value]))
    out["sum"] = 0.0 if nan else float(value) * size  # type: ignore[arg-type]
    return out


class ChunkValues(NamedTuple):
    """The values a writer encoded into a chunk's bytes, handed to the store with them
    (zarr's codec pipeline has them at hand: nothing is decoded again). `whole`: the
    chunk's values; `inner`: a shard's inner chunks written, by their coordinates in the
    shard, with the bytes each was encoded to (the shard's bytes are checked to hold
    exactly those before their values are used) and their statistics if the writer took
    them already; `known`: the statistics of `whole`, if the writer took them already
    (`of_tiles`, or as zarr encoded the chunk); `digest`: the repository's content hash
    of the bytes handed over with these, if the writer hashed them as they were encoded
    (it is then not hashed again; with statistics off, a large chunk's values carry only
    this). A named tuple: one is made per chunk written, and a frozen dataclass cost
    several times as much to make."""

    fill: object
    whole: np.ndarray | None = None
    inner: dict[tuple[int, ...], tuple[np.ndarray, Any, ChunkStats | None]] | None = None
    known: ChunkStats | None = None  # `whole`'s, taken with the write's other chunks
    digest: bytes | None = None  # of the bytes handed over with them

    def stats(self) -> ChunkStats | None:
        """The statistics of `whole`."""
        if self.known is not None:
            return self.known
        return None if self.whole is None else of_chunk(self.whole, self.fill)

    def inner_stats(self, name: str, data: bytes | memoryview) -> ChunkStats | None:
        """The statistics of inner chunk `name` ("i.j") if it was encoded to `data`."""
        got = None if self.inner is None else self.inner.get(_local(name))
        if got is None or memoryview(got[1]).cast("B") != memoryview(data).cast("B"):
            return None
        return got[2] if got[2] is not None else of_chunk(got[0], self.fill)


def _local(name: str) -> tuple[int, ...]:
    return tuple(int(c) for c in name.split("."))


def decoded_stats(doc: bytes, data: bytes | memoryview, inner: bool = False) -> ChunkStats | None:
    """The statistics of chunk bytes `data` of the array whose `zarr.json` is `doc` (an
    inner chunk of its shards with `inner`), decoding them; None when they do not decode
    here."""
    values = decode(doc, data, inner)
    return None if values is None else of_chunk(values, fill_of(doc, inner))


def decode(doc: bytes, data: bytes | memoryview, inner: bool = False) -> np.ndarray | None:
    """The values of chunk bytes `data` of the array whose `zarr.json` is `doc` (an inner
    chunk of its shards with `inner`): the whole chunk shape, as zarr decodes it, without
    an event loop; None when its codecs cannot decode them here."""
    try:
        return decode_values(doc, data, inner)
    except Exception:  # bytes no codec decodes (a test's, or damaged): unknown
        return None


def decode_values(doc: bytes, data: bytes | memoryview, inner: bool = False) -> np.ndarray | None:
    """`decode`, raising the codec's exception when the bytes do not decode; None when
    the array's codecs do not run without an event loop."""
    found = _decoder(doc, inner)
    if found is None:
        return None
    if found.raw is not None and len(data) == found.raw.itemsize * found.size:
        return np.frombuffer(data, found.raw).reshape(found.spec.shape)
    buffer = found.prototype.buffer.from_bytes(data)
    return np.asarray(found.transform.decode_chunk(buffer, found.spec).as_numpy_array())


def fill_of(doc: bytes, inner: bool = False) -> object:
    """The fill value the chunks of the array whose `zarr.json` is `doc` are decoded with."""
    found = _decoder(doc, inner)
    return None if found is None else found.fill


@dataclass(frozen=True)
class _Decoder:
    """How the chunks of one array (or its shards' inner chunks) decode without an event
    loop: zarr's synchronous codec chain and chunk spec; `raw`, the dtype the bytes are a
    view of when the only codec is `bytes` (numpy reads them without zarr's per-call
    buffer machinery: a raw-byte write of tiny chunks pays for the calls, not the values)."""

    transform: Any
    spec: Any
    prototype: Any
    fill: object
    raw: np.dtype | None
    size: int


@lru_cache(maxsize=64)
def _decoder(doc: bytes, inner: bool) -> _Decoder | None:
    """The decoder of the chunks of an array (or of its shards' inner chunks); None for an
    array zarr cannot decode without an event loop."""
    from zarr.codecs.bytes import BytesCodec
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_utils import ChunkTransform
    from zarr.core.dtype.common import HasEndianness
    from zarr.core.metadata.v3 import ArrayV3Metadata

    meta = ArrayV3Metadata.from_dict(json.loads(doc))
    shape = getattr(meta.chunk_grid, "chunk_shape", None)
    if shape is None:
        return None
    codecs = tuple(meta.codecs)
    if inner:
        shard = [c for c in codecs if isinstance(c, ShardingCodec)]
        if len(shard) != 1:
            return None
        codecs, shape = tuple(shard[0].codecs), shard[0].chunk_shape
    prototype = default_buffer_prototype()
    spec = ArraySpec(
        shape=tuple(shape),
        dtype=meta.dtype,
        fill_value=meta.fill_value,
        config=ArrayConfig.from_dict({}),
        prototype=prototype,
    )
    try:
        transform = ChunkTransform(codecs=codecs)
    except TypeError:  # a codec that runs only on an event loop
        return None
    raw = None
    native = meta.dtype.to_native_dtype()
    if len(codecs) == 1 and isinstance(codecs[0], BytesCodec) and native.kind in "fiub":
        raw = native
        if isinstance(meta.dtype, HasEndianness) and codecs[0].endian is not None:
            raw = native.newbyteorder("<" if codecs[0].endian == "little" else ">")
    fill = np.asarray(meta.fill_value).item()
    return _Decoder(transform, spec, prototype, fill, raw, math.prod(shape))


# an array's metadata --------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayLayout:
    """What reading an array's statistics needs of its `zarr.json`."""

    shape: tuple[int, ...]
    unit: tuple[int, ...]  # the chunks statistics are kept for (inner chunks when sharded)
    per_shard: tuple[int, ...] | None  # inner chunks per shard; None without a sharding codec
    dtype: np.dtype
    fill: object
    dims: tuple[str | None, ...]
    encoding: Any  # zarr's ChunkKeyEncoding

    @property
    def kind(self) -> int:
        """The statistics kind of the array's values."""
        return kind_of(self.dtype)

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks per dimension (of the unit chunks)."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.unit, strict=True))

    @property
    def size(self) -> int:
        """Elements per unit chunk."""
        return math.prod(self.unit)


@lru_cache(maxsize=128)
def layout_of(doc: bytes) -> ArrayLayout:
    """The layout of the array whose `zarr.json` is `doc`; InvalidInputError if its chunk
    grid is not regular."""
    from zarr.core.chunk_key_encodings import parse_chunk_key_encoding
    from zarr.core.metadata.v3 import ArrayV3Metadata

    meta = ArrayV3Metadata.from_dict(json.loads(doc))
    shape = getattr(meta.chunk_grid, "chunk_shape", None)
    if shape is None:
        raise InvalidInputError("chunk statistics need a regular chunk grid")
    unit = tuple(int(n) for n in meta.chunks)
    per = None
    if tuple(shape) != unit:
        per = tuple(int(s) // u for s, u in zip(shape, unit, strict=True))
    raw = json.loads(doc)
    return ArrayLayout(
        shape=tuple(int(n) for n in meta.shape),
        unit=unit,
        per_shard=per,
        dtype=meta.dtype.to_native_dtype(),
        fill=meta.fill_value.item() if hasattr(meta.fill_value, "item") else meta.fill_value,
        dims=tuple(meta.dimension_names or (None,) * len(meta.shape)),
        encoding=parse_chunk_key_encoding(
            raw.get("chunk_key_encoding") or {"name": "default", "configuration": {}}
        ),
    )


# reading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayStats:
    """The statistics of every chunk of one array at one snapshot, from its manifests:
    `positions` (C-order positions on the grid, sorted) of the stored chunks and their
    `records`; `unknown_shards`, positions of inner chunks of shards stored whole."""

    path: str
    layout: ArrayLayout
    positions: np.ndarray
    records: np.ndarray

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The records of the chunks at C-order grid `positions`: a chunk with no entry is
        all fill value."""
        out = np.repeat(
            of_fill(self.layout.kind, self.layout.fill, self.layout.size), len(positions)
        )
        if len(self.positions) and len(positions):
            i = np.minimum(np.searchsorted(self.positions, positions), len(self.positions) - 1)
            hit = self.positions[i] == positions
            out[hit] = self.records[i[hit]]
        return out

    def every(self) -> np.ndarray:
        """The records of every chunk of the grid, in C order (the stored ones put in
        place by position, no search)."""
        out = np.repeat(
            of_fill(self.layout.kind, self.layout.fill, self.layout.size),
            math.prod(self.layout.grid),
        )
        out[self.positions] = self.records
        return out

    def table(self) -> pa.Table:
        """Every chunk of the grid, in C order: an int64 column of grid coordinates per
        dimension (named after it), then `count`, `nan_count`, `fill_count`, `min`, `max`
        (the array's dtype; null when unknown or every element is NaN), `sum` (float64)
        and `known`."""
        grid = self.layout.grid
        records = self.every()
        coords = np.unravel_index(np.arange(len(records), dtype=np.int64), grid)
        return to_table(self.layout, [c.astype(np.int64) for c in coords], records)


def to_table(layout: ArrayLayout, coords: list[np.ndarray], records: np.ndarray) -> pa.Table:
    """A statistics table of chunks at `coords` (one array per dimension) with `records`.
    Its columns are made from numpy's buffers (`_util/arrow.py`): `pa.array` would import
    pandas in a new process, a second or so."""
    import pyarrow as pa

    known = usable(layout, records)
    dtype = layout.dtype if layout.kind != sf.UNKNOWN else np.dtype(np.float64)
    kind = layout.kind if layout.kind != sf.UNKNOWN else sf.FLOAT
    lo = sf.values(kind, records["min"]).astype(dtype)
    hi = sf.values(kind, records["max"]).astype(dtype)
    has_value = known & (records["nan"] != records["count"])
    columns: dict[str, pa.Array] = {}
    names = column_names(layout)
    for name, c in zip(names, coords, strict=True):
        columns[name] = arrow.column(c.astype(np.int64, copy=False), pa.int64())
    for name, field in (("count", "count"), ("nan_count", "nan"), ("fill_count", "fill")):
        columns[name] = arrow.column(records[field].astype(np.int64), pa.int64(), known)
    columns["min"] = arrow.column(lo, valid=has_value)
    columns["max"] = arrow.column(hi, valid=has_value)
    columns["sum"] = arrow.column(records["sum"].astype(np.float64), pa.float64(), known)
    columns["known"] = arrow.column(known, pa.bool_())
    return arrow.table(columns)


def column_names(layout: ArrayLayout) -> list[str]:
    """The coordinate columns' names: the dimension names, `dim_<i>` where there is none
    (or it would repeat a statistics column or another dimension)."""
    out: list[str] = []
    for i, d in enumerate(layout.dims):
        name = d if d and d not in STAT_COLUMNS and d not in out else f"dim_{i}"
        out.append(name)
    return out


def usable(layout: ArrayLayout, records: np.ndarray) -> np.ndarray:
    """Which records hold statistics of the array's values as they are now (a record of
    another kind or element count, from before the array was redefined, does not)."""
    ok = records["kind"] == layout.kind
    ok &= records["count"] == layout.size
    return ok & (layout.kind != sf.UNKNOWN)


def array_stats(objects: Objects, commit_id: str, path: str) -> ArrayStats:
    """The statistics of array `path` at commit `commit_id`, read from its manifests only;
    NotFoundError if there is no array at `path`."""
    path = path.strip("/")
    snapshot = objects.snapshot_of(commit_id)
    root = objects.read(SnapshotRoot, snapshot)
    doc = root.meta.get(f"{path}/zarr.json" if path else "zarr.json")
    if doc is None or not is_array_doc(doc):
        raise NotFoundError(
            f"no array {path!r} at commit {commit_id[:12]}; run `zarrlake ls {commit_id[:12]}` "
            "to see its arrays"
        )
    view = SnapshotView(objects, root, snapshot)
    return read(path, doc, view.entries_under(f"{path}/".encode() if path else b""))


def records_at(
    view: SnapshotView, path: str, layout: ArrayLayout, coords: Sequence[Sequence[int]]
) -> np.ndarray:
    """The records of the chunks of array `path` at grid `coords` in snapshot `view`, each
    looked up by its key (a change's chunks, without reading the array's other entries):
    fill for a chunk with no entry, unknown where statistics are unknown or stale."""
    prefix = f"{path}/" if path else ""
    fill = of_fill(layout.kind, layout.fill, layout.size)
    out = np.zeros(len(coords), STATS)
    per = layout.per_shard
    for i, c in enumerate(coords):
        if per is None:
            ref = view.get(prefix + layout.encoding.encode_chunk_key(tuple(c)))
            whole = False
        else:
            shard = prefix + layout.encoding.encode_chunk_key(
                tuple(k // p for k, p in zip(c, per, strict=True))
            )
            ref = view.get(
                inner_key(shard, ".".join(str(k % p) for k, p in zip(c, per, strict=True)))
            )
            whole = ref is None and view.get(shard) is not None  # stored whole: unknown
        if ref is None:
            if not whole:
                out[i] = fill[0]
        elif ref.stats is not None:
            out[i] = ref.stats
    out[~usable(layout, out)] = np.zeros(1, STATS)
    return out


def inside(layout: ArrayLayout, coords: Sequence[int]) -> int:
    """Elements of unit chunk `coords` inside the array's shape."""
    return math.prod(
        max(0, min(u, s - k * u)) for k, u, s in zip(coords, layout.unit, layout.shape, strict=True)
    )


def read(path: str, doc: bytes, pieces: list[ManifestRange]) -> ArrayStats:
    """The statistics of array `path` (its `zarr.json` is `doc`) from the manifest entries
    under its path (`pieces`, in key order)."""
    layout = layout_of(doc)
    grid = layout.grid
    prefix = f"{path}/" if path else ""
    positions: list[np.ndarray] = []
    records: list[np.ndarray] = []
    for piece in pieces:
        if not len(piece):
            continue
        pos, rec = _entries(layout, grid, prefix, piece)
        positions.append(pos)
        records.append(rec)
    if not positions:
        return ArrayStats(path, layout, np.zeros(0, np.int64), np.zeros(0, STATS))
    pos, rec = np.concatenate(positions), np.concatenate(records)
    keep = pos >= 0
    pos, rec = pos[keep], rec[keep]
    order = np.argsort(pos, kind="stable")
    pos, rec = pos[order], rec[order]
    rec[~usable(layout, rec)] = np.zeros(1, STATS)  # unknown, not fill
    last = np.ones(len(pos), bool)  # an inner chunk entry wins over its shard's whole entry
    last[:-1] = pos[1:] != pos[:-1]
    return ArrayStats(path, layout, pos[last], rec[last])


def _entries(
    layout: ArrayLayout, grid: tuple[int, ...], prefix: str, piece: ManifestRange
) -> tuple[np.ndarray, np.ndarray]:
    """(grid positions, records) of one piece's entries; -1 for keys that are no chunk of
    the grid; a shard stored whole gives each of its inner chunks an unknown record. Keys
    are parsed as columns (a Python loop costs microseconds a key); the loop decides only
    keys not of the plain form and shards stored whole."""
    rec = piece.stats if piece.stats is not None else np.zeros(len(piece), STATS)
    pos = _positions(piece.keys, len(prefix.encode()), layout.encoding, grid, layout.per_shard)
    if pos is None:
        pos = np.full(len(piece), -2, np.int64)
    slow = np.flatnonzero(pos == -2)
    if not len(slow):
        return pos, rec
    extra_pos: list[int] = []
    for i, key in zip(slow.tolist(), piece.keys[slow].tolist(), strict=True):
        pos[i], whole = _position(key.decode()[len(prefix) :], layout, grid)
        extra_pos += whole
    if extra_pos:
        pos = np.concatenate([np.array(extra_pos, np.int64), pos])
        rec = np.concatenate([np.zeros(len(extra_pos), STATS), rec])
    return pos, rec


def _position(text: str, layout: ArrayLayout, grid: tuple[int, ...]) -> tuple[int, list[int]]:
    """(grid position or -1, inner positions of a shard stored whole) of one chunk key
    (the array's path cut off)."""
    per = layout.per_shard
    shard, sep, inner = text.partition(SEP)
    try:
        coords = tuple(int(c) for c in layout.encoding.decode_chunk_key(shard))
    except ValueError:
        return -1, []
    if len(coords) != len(grid):
        return -1, []
    if per is not None:
        if not sep:  # a shard stored whole: its inner chunks are unknown
            return -1, _inner_positions(coords, per, grid)
        local = tuple(int(c) for c in inner.split("."))
        coords = tuple(s * p + k for s, p, k in zip(coords, per, local, strict=True))
    if not all(0 <= c < g for c, g in zip(coords, grid, strict=True)):
        return -1, []
    return int(np.ravel_multi_index(coords, grid)), []


def _positions(
    keys: np.ndarray, skip: int, enc: Any, grid: tuple[int, ...], per: tuple[int, ...] | None
) -> np.ndarray | None:
    """The grid positions of chunk `keys` (bytes, `skip` bytes of array path first), parsed
    as columns: -1 for a key outside the grid, -2 for one the loop decides (a shard stored
    whole, in a sharded array: `per` inner chunks per shard); None when the keys are not
    all of the plain form `[c<sep>]i<sep>j...[<SEP>k.l...]` (the loop decides them all)."""
    import pyarrow.compute as pc

    if not grid or not len(keys):
        return None
    keys = np.ascontiguousarray(keys)
    text = arrow.strings(keys, skip)
    if text is None:
        return None
    out = np.full(len(keys), -2, np.int64)
    if per is None:
        coords = _coords(text, enc, len(grid))
        rows = np.arange(len(keys))
    else:  # "<shard key><SEP><i.j...>": the shard's grid coordinates, then the inner ones
        grid_bytes = keys.view(np.uint8).reshape(len(keys), keys.dtype.itemsize)
        inner = (grid_bytes[:, skip:] == ord(SEP)).any(axis=1)
        rows = np.flatnonzero(inner)
        if not len(rows):
            return out
        chosen = text.take(arrow.column(rows.astype(np.int64)))
        halves = pc.list_flatten(pc.split_pattern(chosen, SEP, max_splits=1))  # (2 a key)
        pairs = np.arange(2 * len(rows), dtype=np.int64).reshape(-1, 2)
        shard = _coords(halves.take(arrow.column(pairs[:, 0].copy())), enc, len(grid))
        local = _ints(halves.take(arrow.column(pairs[:, 1].copy())), ".", len(grid))
        coords = None if shard is None or local is None else shard * np.asarray(per) + local
    if coords is None:
        return None
    inside = ((coords >= 0) & (coords < np.asarray(grid))).all(axis=1)
    at = np.full(len(coords), -1, np.int64)
    at[inside] = np.ravel_multi_index(tuple(coords[inside].T), grid)
    out[rows] = at
    return out


def _coords(text: Any, enc: Any, nd: int) -> np.ndarray | None:
    """The (n, nd) grid coordinates of chunk keys `text` (a pyarrow string array) in the
    chunk key encoding `enc`; None unless every key is `[c<sep>]i<sep>j...`."""
    import pyarrow.compute as pc

    sep = getattr(enc, "separator", None)
    if sep not in ("/", "."):
        return None
    if getattr(enc, "name", None) == "default":
        head = "c" + sep
        if not pc.all(pc.starts_with(text, head)).as_py():
            return None
        text = pc.utf8_slice_codeunits(text, len(head))
    return _ints(text, sep, nd)


def _ints(text: Any, sep: str, nd: int) -> np.ndarray | None:
    """`text` (pyarrow strings of `nd` integers joined by `sep`) as an (n, nd) int64 array;
    None when one is not."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(text, sep)
    if (arrow.numbers(pc.list_value_length(parts), np.int32) != nd).any():
        return None
    try:
        flat = arrow.numbers(pc.cast(pc.list_flatten(parts), pa.int64()), np.int64)
    except (pa.ArrowInvalid, ValueError):
        return None
    return flat.reshape(-1, nd)


def _inner_positions(shard: tuple[int, ...], per: tuple[int, ...], grid: tuple[int, ...]):
    ranges = [
        np.arange(s * p, min((s + 1) * p, g), dtype=np.int64)
        for s, p, g in zip(shard, per, grid, strict=True)
    ]
    if any(len(r) == 0 for r in ranges):
        return []
    mesh = np.meshgrid(*ranges, indexing="ij")
    return np.ravel_multi_index([m.reshape(-1) for m in mesh], grid).tolist()
