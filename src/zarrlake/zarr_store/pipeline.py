"""The codec pipeline zarr uses once a session store exists in the process: zarr's default
(`BatchedCodecPipeline`) with two additions for arrays on a session store, and nothing
changed for other stores.

- A read whose chunk bytes the codecs cannot decode raises `UndecodableChunkError` naming
  the array, the chunk's coordinates and the codec's message (zarr would raise the codec's
  bare `RuntimeError` or `ValueError`).
- A read's small chunks (up to `INLINE_MAX` bytes decoded) are decoded on the event loop,
  through the codecs' synchronous decode: zarr hands each compressed chunk to a thread,
  which costs more than decoding a small one (and, in a new process, starts the thread).
- An array write's large chunks are held by the store until zarr has handed over the
  last one, then recorded in one metastore write, uploaded and staged together
  (`write_scope.py`).
- An array write's whole large chunks (each a view of the written array, TILES_MAX
  elements or more, codecs that encode synchronously) do not go through zarr's per-chunk
  coroutines: each chunk's statistics, codecs and hash are one task on one thread per
  core (`encoders.py`), and the event loop only hands the bytes to the store
  (`_write_whole`); the write's other chunks (edge, partial) are zarr's as before.
- After an array write, the store is told (`array_written`): a Dask task's copy of a
  session finishes there, so the task's writes are durable and counted when it returns.
- The values each chunk was encoded from travel to the store with its bytes (`handed`), so
  the store computes the chunk's statistics from them instead of decoding the bytes again:
  the encoded buffer is the key (the store gets exactly that object), and a shard's inner
  chunks are named by their coordinates once the shard's inner write is done (the store
  checks the shard holds exactly the bytes each was encoded to).
- A write's whole small chunks, which zarr encodes as views of the written array, get
  their statistics together before zarr encodes them (`_taken_together`): a reduction per
  statistic over all of them instead of a handful of numpy calls each. They are used for
  a chunk whose values zarr encoded as such a view (a view of the written array, of the
  chunk's shape, strides and dtype: zarr's view of a whole chunk is the written array at
  the chunk's selection), so a chunk zarr merged with what it held or copied gets its
  own, as before.

`install` makes it zarr's pipeline unless the process chose another one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from zarr.codecs.bytes import BytesCodec
from zarr.core.codec_pipeline import BatchedCodecPipeline

from zarrlake.errors import ZarrLakeError
from zarrlake.format.statistics import ChunkStats
from zarrlake.vc.statistics import TILES_MAX, ChunkValues, of_chunk, of_tiles
from zarrlake.zarr_store import write_scope


@dataclass(frozen=True, slots=True)
class _Taken:
    """The statistics of a write's whole small chunks (`_taken_together`), by the chunk's
    key (a store path; an inner chunk's coordinates in its shard); `owner`, what numpy
    names as the base of a view of the written array; `shape`, `strides` and `dtype`, of
    each chunk's view of it (a slice of the array has its strides)."""

    owner: object
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    by_key: dict[object, tuple]  # (their fields: `statistics.of_tiles`)

    @classmethod
    def over(cls, array: np.ndarray, chunk: tuple[int, ...], by_key: dict[object, tuple]) -> _Taken:
        """The statistics `by_key` of chunks that zarr takes as `chunk`-shaped views of the
        written `array`."""
        owner = array[tuple(slice(0, 1) for _ in chunk)].base  # (numpy's base of its views)
        return cls(owner, chunk, array.strides, array.dtype, by_key)

    def of(self, key: object, values: np.ndarray) -> ChunkStats | None:
        """The statistics of chunk `key` if zarr encoded it from `values` as the view of
        the written array it takes of a whole chunk (at the chunk's selection: its base,
        shape, strides and dtype say so; a merged or copied chunk is an array of its
        own), else None."""
        if values.base is not self.owner or values.shape != self.shape:
            return None
        if values.strides != self.strides or values.dtype != self.dtype:
            return None
        got = self.by_key.pop(key, None)  # (once)
        return None if got is None else _STATS(ChunkStats, got)  # (`as_stats`, inlined:
        # one Python call less a chunk)


_GIVEN: ContextVar[_Taken | None] = ContextVar("zarrlake_given", default=None)
"""The statistics a writer took of the chunks it is writing (`given`)."""
_WANTS: ContextVar[bool] = ContextVar("zarrlake_wants", default=False)
"""Whether the write in progress is to a store that keeps statistics (a sharding codec's
inner writes, whose byte setters name no store, take them if so)."""


@dataclass(slots=True)
class _Handover:
    """What a write to a session store hands it with each chunk's bytes: `bufs`, id of
    each encoded buffer -> (the buffer, the values it encodes, their statistics if taken
    as it was encoded, the buffer's digest if hashed as it was encoded); `fill`, the
    array's fill value as a plain Python value (made once a write, not once a chunk);
    `stats`, whether the store keeps statistics (else only large chunks' digests are
    handed); `digest`, the store's content hash, for large chunks hashed as they are
    encoded (None: the store hashes); `taken`, the statistics taken together for the
    write (`_taken_together`, `given`)."""

    fill: Any
    stats: bool = True
    digest: Callable[[Any], bytes] | None = None
    taken: _Taken | None = None
    bufs: dict[int, tuple[Any, Any, ChunkStats | None, bytes | None]] = field(default_factory=dict)


_Whole = tuple[Any, Any, Any, list[tuple[Any, Any]]]
"""A whole large chunk of a write (`_whole_large`): (zarr's byte setter, the chunk's spec,
zarr's buffer of its values, each codec with its spec)."""

_HANDED: ContextVar[_Handover | None] = ContextVar("zarrlake_handed", default=None)
"""The hand-over of the write in progress (in this task and the ones it starts), if its
store takes values."""
_INNER: ContextVar[ChunkValues | None] = ContextVar("zarrlake_inner", default=None)
"""The inner chunks a sharding codec's inner write just encoded, for the store's next
`set` in the same task (the shard holding them)."""

_INLINE: ContextVar[bool] = ContextVar("zarrlake_inline", default=False)
"""Whether the read in progress is from a session store (its small chunks decode inline)."""

DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"

INLINE_MAX = 64 * 1024
"""Decoded bytes of a batch of chunks up to which it is decoded on the event loop: about
what a hop to a thread and back costs in decoding time."""


class SessionPipeline(BatchedCodecPipeline):
    """zarr's batched codec pipeline, naming undecodable chunks of session stores and
    telling them when an array write is done."""

    async def read(
        self, batch_info: Iterable[Any], out: Any, drop_axes: tuple[int, ...] = ()
    ) -> Any:
        """zarr's read; a chunk of a session store that does not decode raises
        UndecodableChunkError naming it."""
        batch = list(batch_info)
        inline = bool(batch) and all(
            hasattr(getattr(item[0], "store", None), "takes_values") for item in batch
        )
        token = _INLINE.set(True) if inline else None
        try:
            return await super().read(batch, out, drop_axes)
        except ZarrLakeError:
            raise
        except Exception as e:
            found = await self._undecodable(batch)
            if found is None:
                raise
            raise found from e
        finally:
            if token is not None:
                _INLINE.reset(token)

    async def decode_batch(self, chunk_bytes_and_specs: Iterable[Any]) -> Iterable[Any]:
        """zarr's decode; a session store's small chunks are decoded here, on the loop
        (`INLINE_MAX`), when every codec can decode synchronously."""
        items = list(chunk_bytes_and_specs)
        if _INLINE.get() and self._decodes_inline(items):
            return self._decode_here(items)
        return await super().decode_batch(items)

    def _decodes_inline(self, items: list[Any]) -> bool:
        """Whether `items` (encoded chunk, spec) are few bytes and every codec has a
        synchronous decode (zarr 3.2 and later; a sharding codec may opt out)."""
        codecs = (*self.array_array_codecs, self.array_bytes_codec, *self.bytes_bytes_codecs)
        if not all(
            hasattr(c, "_decode_sync") and getattr(c, "_sync_capable", True) for c in codecs
        ):
            return False
        size = 0
        for _, spec in items:
            dtype = spec.dtype
            native = dtype.to_native_dtype() if hasattr(dtype, "to_native_dtype") else dtype
            size += math.prod(spec.shape) * np.dtype(native).itemsize
        return size <= INLINE_MAX

    def _decode_here(self, items: list[Any]) -> list[Any]:
        """zarr's `decode_batch`, each codec's synchronous decode run on this thread."""
        chunks = [data for data, _ in items]
        aa, (ab, ab_specs), bb = self._codecs_with_resolved_metadata_batched(
            spec for _, spec in items
        )
        stages: list[tuple[Any, list[Any]]] = [*bb[::-1], (ab, ab_specs), *aa[::-1]]
        for codec, specs in stages:  # (bytes to bytes, to an array, array to array)
            chunks = _decoded(codec, chunks, specs)
        return chunks

    async def write(
        self, batch_info: Iterable[Any], value: Any, drop_axes: tuple[int, ...] = ()
    ) -> None:
        """zarr's write, its large chunks held by session stores and sent together at its
        end (`write_scope.within`); then each session store written to hears that it is
        done. The values of the chunks written to a session store are handed to it (see
        `handed`)."""
        batch = list(batch_info)
        stores = [getattr(item[0], "store", None) for item in batch]  # (inner pipelines of
        # a sharding codec write through shard byte setters: no store)
        inner = _HANDED.get() is not None and all(hasattr(i[0], "shard_dict") for i in batch)
        digest = None
        if inner:  # (a shard's inner chunks, for the statistics its write takes)
            wants = _WANTS.get()
        else:  # values are handed over for statistics only: with them off, none are
            # kept (a large chunk's digest still is)
            unique = [s for s in {id(s): s for s in stores}.values() if s is not None]
            wants = any(
                hasattr(s, "takes_values") and getattr(s, "computes_statistics", False)
                for s in unique  # (a write's chunks share one)
            )
            if len(unique) == 1:  # large chunks hashed as they are encoded
                digest = getattr(unique[0], "chunk_digest", None)
        handover = (
            _Handover(_plain(batch[0][1].fill_value), wants, digest)
            if (wants or digest is not None) and batch
            else None
        )
        if wants and handover is not None and not self.supports_partial_encode:  # (else: shards,
            # whose inner chunks are an inner write's); a writer's own (`given`), else
            # taken here if there are enough
            handover.taken = _GIVEN.get() or _taken_together(batch, value, drop_axes, inner)
        whole: list[_Whole] = []
        rest = batch
        if handover is not None and not inner and not self.supports_partial_encode:
            whole, rest = self._whole_large(batch, value, drop_axes)
            rest = _screened(rest, value, drop_axes)
        token = _HANDED.set(handover)
        wanted = _WANTS.set(wants)
        try:
            if any(hasattr(s, "holds_chunks") for s in stores):

                async def run() -> None:
                    if whole and handover is not None:
                        await self._write_whole(whole, handover)
                    # (zarr's write is called even with no chunk left: what wraps it
                    # sees every array write)
                    await super(SessionPipeline, self).write(rest, value, drop_axes)

                await write_scope.within(run)
            else:
                await super().write(batch, value, drop_axes)
        finally:
            _HANDED.reset(token)
            _WANTS.reset(wanted)
        if inner:  # for the store's `set` of the shard, next in this task
            _INNER.set(None if handover is None else _inner_values(batch, handover))
        for store in {id(s): s for s in stores if s is not None}.values():
            written = getattr(store, "array_written", None)
            if written is not None:
                await written()

    def _whole_large(
        self, batch: list[Any], value: Any, drop_axes: tuple[int, ...]
    ) -> tuple[list[_Whole], list[Any]]:
        """`batch` (zarr's write items) split into the whole large chunks this pipeline
        encodes itself (`_write_whole`: a session store's, TILES_MAX elements or more, each
        a view of the written array of the chunk's shape, codecs that encode synchronously
        with zarr's `bytes` codec) and the rest, which zarr's pipeline writes."""
        if drop_axes or not self._encodes_synchronously():
            return [], batch
        array = value.as_ndarray_like()
        if not isinstance(array, np.ndarray) or array.ndim == 0:
            return [], batch
        whole: list[_Whole] = []
        rest = []
        stages: dict[int, list[tuple[Any, Any]]] = {}  # id(spec): each codec with its spec
        for item in batch:
            setter, spec, _, out_selection, complete = item
            shape = tuple(spec.shape)  # (small chunks leave first: no view made of them)
            if (
                complete
                and math.prod(shape) >= TILES_MAX
                and hasattr(getattr(setter, "store", None), "holds_chunks")
            ):
                selected = value[out_selection]  # (zarr's own view of a whole chunk)
                if selected.shape == shape:
                    chain = stages.get(id(spec))
                    if chain is None:
                        aa, (ab, ab_specs), bb = self._codecs_with_resolved_metadata_batched([spec])
                        chain = stages[id(spec)] = [
                            (codec, specs[0]) for codec, specs in (*aa, (ab, ab_specs), *bb)
                        ]
                    whole.append((setter, spec, selected, chain))
                    continue
            rest.append(item)
        return whole, rest

    async def _write_whole(self, whole: list[_Whole], handover: _Handover) -> None:
        """Write the whole large chunks `whole` (`_whole_large`): each chunk's statistics,
        codecs and hash one task on the encoding threads (`encoders.py`: the statistics
        just before zstd reads the same values, from the core's cache), its bytes handed
        to the store on this event loop, in order; a chunk of fill values only (zarr's
        `write_empty_chunks` off) deleted, as zarr does."""

        def encode(job: _Whole) -> tuple[Any, Any, ChunkStats | None, bytes | None]:
            setter, spec, selected, chain = job
            values = selected.as_numpy_array()
            if _empty(selected, values, spec):
                return None, None, None, None
            stats = None
            if handover.stats:
                taken = handover.taken
                stats = None if taken is None else taken.of(setter.path, values)
                if stats is None:
                    stats = of_chunk(values, handover.fill)
            chunk = selected
            for codec, codec_spec in chain:
                chunk = codec._encode_sync(chunk, codec_spec)
            hash_ = handover.digest
            digest = None if hash_ is None else hash_(chunk.as_buffer_like())
            return chunk, values if handover.stats else None, stats, digest

        async def store(job: _Whole, got: tuple[Any, Any, ChunkStats | None, bytes | None]) -> None:
            buf = got[0]
            if buf is None:
                await job[0].delete()
                return
            handover.bufs[id(buf)] = got
            await job[0].set(buf)

        from zarrlake.zarr_store import encoders  # (its threads: a writer's only)

        await encoders.in_order(whole, encode, store)

    async def encode_batch(self, chunk_arrays_and_specs: Iterable[Any]) -> Iterable[Any]:
        """zarr's encode; within a write to a session store, each buffer made is noted
        with the values it encodes. Large chunks (TILES_MAX elements or more) that zarr
        encodes (a partial chunk merged with what it held: whole ones are `_write_whole`'s)
        are encoded on one thread each batch, their statistics taken just before (zstd then
        reads values the statistics brought into the core's cache, instead of the
        statistics reading them from memory again at the upload) and their bytes hashed
        just after (as they leave the compressor)."""
        items = list(chunk_arrays_and_specs)
        handover = _HANDED.get()
        if handover is None:
            return await super().encode_batch(items)
        if self._encodes_here(items):
            out, taken = await asyncio.to_thread(self._encode_here, items, handover)
        else:
            out = list(await super().encode_batch(items))
            if not handover.stats:
                return out
            taken = None
        bufs = handover.bufs
        for i, ((array, _), buf) in enumerate(zip(items, out, strict=True)):
            if array is not None and buf is not None:
                stats, digest = (None, None) if taken is None else taken[i]
                values = array.as_numpy_array() if handover.stats else None
                bufs[id(buf)] = (buf, values, stats, digest)
        return out

    def _encodes_here(self, items: list[Any]) -> bool:
        """Whether `items` are large chunks whose codecs all encode synchronously and
        whose array-to-bytes codec is zarr's `bytes` (not a sharding codec, whose inner
        writes hand their chunks over in this task)."""
        some = False
        for array, _ in items:  # (zarr encodes one chunk a call: a loop, no generator)
            if array is not None:
                if array.as_ndarray_like().size < TILES_MAX:
                    return False
                some = True
        return some and self._encodes_synchronously()

    def _encodes_synchronously(self) -> bool:
        """Whether the array-to-bytes codec is zarr's `bytes` (not a sharding codec, whose
        inner writes hand their chunks over in their own task) and every other codec has a
        synchronous encode."""
        if type(self.array_bytes_codec) is not BytesCodec:
            return False
        codecs = (*self.array_array_codecs, *self.bytes_bytes_codecs)
        return all(hasattr(c, "_encode_sync") and getattr(c, "_sync_capable", True) for c in codecs)

    def _encode_here(
        self, items: list[Any], handover: _Handover
    ) -> tuple[list[Any], list[tuple[ChunkStats | None, bytes | None]]]:
        """zarr's `encode_batch` on this thread, each codec's synchronous encode in
        turn; with each chunk's (statistics, digest) when the store takes them."""
        arrays = [a for a, _ in items]
        fill = handover.fill
        stats = [
            None if a is None or not handover.stats else of_chunk(a.as_numpy_array(), fill)
            for a in arrays
        ]
        aa, (ab, ab_specs), bb = self._codecs_with_resolved_metadata_batched(
            spec for _, spec in items
        )
        chunks: list[Any] = arrays
        stages: list[tuple[Any, list[Any]]] = [*aa, (ab, ab_specs), *bb]
        for codec, specs in stages:
            chunks = [
                None if c is None else codec._encode_sync(c, spec)
                for c, spec in zip(chunks, specs, strict=True)
            ]
        hash_ = handover.digest
        digests = [
            None if c is None or hash_ is None else hash_(c.as_buffer_like()) for c in chunks
        ]
        return chunks, list(zip(stats, digests, strict=True))

    async def _undecodable(self, batch: list[Any]) -> ZarrLakeError | None:
        """The error naming the first chunk of `batch` on a session store that does not
        decode (and how many more do not), or None if each decodes alone."""

        async def attempt(item: Any) -> tuple[Any, Exception] | None:
            getter, spec = item[0], item[1]
            if getattr(getattr(getter, "store", None), "undecodable", None) is None:
                return None
            data = await getter.get(prototype=spec.prototype)
            if data is None:
                return None
            try:
                await self.decode([(data, spec)])
            except ZarrLakeError:
                return None  # the store's own error (checksum, missing object): not this
            except Exception as e:
                return getter, e
            return None

        failed = [f for f in await asyncio.gather(*(attempt(i) for i in batch)) if f]
        if not failed:
            return None
        getter, error = failed[0]
        return await getter.store.undecodable(getter.path, error, len(failed) - 1)


def _decoded(codec: Any, chunks: list[Any], specs: list[Any]) -> list[Any]:
    """`chunks` decoded by `codec` (None stays None, as zarr's batched decode has it)."""
    return [
        None if chunk is None else codec._decode_sync(chunk, spec)
        for chunk, spec in zip(chunks, specs, strict=True)
    ]


def taken_by(block: np.ndarray, by_key: dict[object, tuple]) -> _Taken:
    """The statistics `by_key` (store key -> `statistics.of_rows`' fields) a writer took
    together of whole chunks it writes, each as one array write of a view of the memory
    `block` (one of them) is a view of, with `block`'s shape, strides and dtype (`given`)."""
    return _Taken.over(block, tuple(block.shape), by_key)


def given[T](taken: _Taken | None, write: Callable[[], T]) -> T:
    """Run `write` (zarr array writes; zarr's synchronous API runs them in a copy of this
    thread's context) with the statistics `taken` (`taken_by`): a chunk zarr encodes as a
    view of the writer's memory, of its whole chunk's shape, gets them, if the store keeps
    statistics; a chunk zarr merged or copied gets its own, as ever."""
    token = _GIVEN.set(taken)
    try:
        return write()
    finally:
        _GIVEN.reset(token)


def handed(value: Any, key: str) -> ChunkValues | None:
    """The values the chunk bytes `value` (a buffer a session store is given for `key`)
    were encoded from, with their statistics if the write took them: a chunk of the write
    in progress, or the shard whose inner write just ended in this task; None when the
    store is given bytes some other way."""
    inner = _INNER.get()
    if inner is not None:
        _INNER.set(None)
        return inner
    found = _HANDED.get()
    if found is None:
        return None
    got = found.bufs.pop(id(value), None)
    if got is None or got[0] is not value:
        return None
    taken = found.taken
    known = None if taken is None or got[1] is None else taken.of(key, got[1])
    if known is None:
        known = got[2]
    return _VALUES(ChunkValues, (found.fill, got[1], None, known, got[3]))  # (the named tuple's
    # `__new__` is a Python call: made as the tuple it is, as `as_stats` does)


_VALUES = _STATS = tuple.__new__


TOGETHER_MIN = 8
"""Whole chunks of a write from which their statistics are taken together."""


def _taken_together(
    batch: list[Any], value: Any, drop_axes: tuple[int, ...], inner: bool
) -> _Taken | None:
    """The statistics of the whole chunks of a write (`batch`, zarr's (setter, spec,
    chunk selection, out selection, whole) items, writing `value`; `inner`: a shard's
    inner chunks) that are small blocks of the written array on one grid, taken together
    (`statistics.of_tiles`); None when there are not enough of them (edge chunks, partial
    and scalar writes, chunks of `TILES_MAX` elements or more: each chunk's own are taken
    as zarr encodes it)."""
    if drop_axes or len(batch) < TOGETHER_MIN:
        return None
    array = value.as_ndarray_like()
    spec = batch[0][1]
    chunk = tuple(spec.shape)
    if (
        not isinstance(array, np.ndarray)
        or array.ndim != len(chunk)
        or array.ndim == 0
        or math.prod(chunk) >= TILES_MAX
        or array.dtype != spec.dtype.to_native_dtype()
    ):
        return None
    nd = array.ndim
    items = [item for item in batch if item[4] and item[1] is spec]
    outs = [item[3] for item in items]
    if len(outs) < TOGETHER_MIN or {len(o) for o in outs} != {nd}:
        return None
    try:  # (slices of ints: an index array has no start, a None start is no int64)
        ends = [x for o in outs for s in o for x in (s.start, s.stop)]  # (inlined: no
        # generator resumed per value)
        bounds = np.fromiter(ends, np.int64, 2 * len(outs) * nd).reshape(len(outs), nd, 2)
    except (AttributeError, TypeError, ValueError):
        return None
    starts = bounds[:, :, 0]
    whole = (bounds[:, :, 1] - starts == chunk).all(axis=1)  # (not a cut edge chunk)
    if whole.sum() < TOGETHER_MIN:
        return None
    stats = of_tiles(array, chunk, starts[whole], _plain(spec.fill_value))
    if stats is None:
        return None
    keys = [
        tuple(item[0].chunk_coords) if inner else item[0].path
        for item, ok in zip(items, whole.tolist(), strict=True)
        if ok
    ]
    return _Taken.over(array, chunk, dict(zip(keys, stats, strict=True)))


def _screened(batch: list[Any], value: Any, drop_axes: tuple[int, ...]) -> list[Any]:
    """`batch` (zarr's write items) with each whole chunk whose first value is not the fill
    value marked `write_empty_chunks`, so that zarr skips its empty-chunk check of it:
    that check compares every value of a chunk whose first axis is 1 long (its early exit
    splits the first axis), a pass over the chunk's values on the event loop's thread
    (about a tenth of W1's CPU), for an answer the first value already gives. A chunk
    whose first value is the fill value is checked by zarr as before; what is stored is
    the same either way."""
    if drop_axes or not batch:
        return batch
    array = value.as_ndarray_like()
    if not isinstance(array, np.ndarray) or array.ndim == 0 or array.dtype.kind not in "biuf":
        return batch
    out = []
    marked: dict[int, Any] = {}
    for item in batch:
        setter, spec, chunk_selection, out_selection, whole = item
        config = getattr(spec, "config", None)
        if (
            whole
            and config is not None
            and not config.write_empty_chunks
            and len(out_selection) == array.ndim
            and all(type(s) is slice for s in out_selection)
            and _not_fill(array[tuple(s.start or 0 for s in out_selection)], spec.fill_value)
        ):
            new = marked.get(id(spec))
            if new is None:
                new = marked[id(spec)] = dataclasses.replace(
                    spec, config=dataclasses.replace(config, write_empty_chunks=True)
                )
            item = (setter, new, chunk_selection, out_selection, whole)
        out.append(item)
    return out


def _empty(selected: Any, values: np.ndarray, spec: Any) -> bool:
    """Whether zarr would not store a whole chunk of `values` (`selected`, zarr's buffer of
    them): `write_empty_chunks` off and every value the fill value (zarr's `all_equal`,
    asked only when the first value is the fill value)."""
    if spec.config.write_empty_chunks:
        return False
    fill = spec.fill_value
    if fill is None:  # (zarr's default for the dtype then)
        fill = spec.dtype.default_scalar()
    if _not_fill(values[(0,) * values.ndim], fill):
        return False
    return bool(selected.all_equal(fill))


def _not_fill(first: Any, fill: Any) -> bool:
    """Whether a value differs from the fill value wherever zarr's `all_equal` compares
    them (bit for bit, NaN equal to any NaN): False when in doubt."""
    if fill is None:  # (zarr then compares with its dtype's default)
        return False
    try:
        fill_value = np.asarray(fill, dtype=first.dtype)
    except (TypeError, ValueError, OverflowError):
        return False
    if first.dtype.kind == "f" and np.isnan(fill_value):
        return not np.isnan(first)
    return first.tobytes() != fill_value.tobytes()


def _inner_values(batch: list[Any], handover: _Handover) -> ChunkValues | None:
    """The values of the inner chunks a sharding codec's inner write encoded, by their
    coordinates in the shard, with the bytes each was encoded to and their statistics if
    the write took them."""
    inner: dict[tuple[int, ...], tuple[Any, Any, ChunkStats | None]] = {}
    taken = handover.taken
    for item in batch:
        setter = item[0]
        buf = setter.shard_dict.get(setter.chunk_coords)
        got = None if buf is None else handover.bufs.get(id(buf))
        if got is not None and got[0] is buf and got[1] is not None:
            coords = tuple(setter.chunk_coords)
            known = None if taken is None else taken.of(coords, got[1])
            if known is None:
                known = got[2]
            inner[coords] = (got[1], buf.as_numpy_array(), known)
    return ChunkValues(handover.fill, inner=inner) if inner else None


def _plain(fill: Any) -> Any:
    """A fill value as a plain Python value (zarr gives a numpy scalar)."""
    return None if fill is None else np.asarray(fill).item()


_INSTALLED: list[bool] = []


def install() -> None:
    """Make SessionPipeline zarr's codec pipeline, unless the process configured another
    one than zarr's default (then reads raise the codecs' own errors, and a Dask task's
    copy of a session finishes when it is collected instead)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    import zarr
    from zarr.registry import register_pipeline

    register_pipeline(SessionPipeline)
    if zarr.config.get("codec_pipeline.path") == DEFAULT:
        zarr.config.set({"codec_pipeline.path": f"{__name__}.{SessionPipeline.__name__}"})
