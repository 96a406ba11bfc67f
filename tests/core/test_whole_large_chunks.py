"""A session store's array write encodes its whole large chunks itself, on one thread per
core (`zarr_store/encoders.py`), not through zarr's per-chunk coroutines: what is stored
is what zarr stores (the same bytes as plain zarr's, all-fill chunks left out unless
`write_empty_chunks`), each chunk's statistics are numpy's, other chunks of the write
(edge chunks, partial ones) go through zarr's pipeline, and an encoder's error fails the
write with nothing uploaded."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs.zstd import ZstdCodec

import zarrlake as zl
from tests.core.counting import counted
from tests.helpers.fill_chunks import fill_chunks
from tests.statistics.model import Spec, assert_matches
from zarrlake.vc.gc_protocol import uploads_partition
from zarrlake.zarr_store.pipeline import SessionPipeline

SIDE = 128  # a (1, 128, 128) float32 chunk: 16,384 values, a large one


def _values(fill: float) -> np.ndarray:
    """Chunks of (1, SIDE, SIDE): `fill_chunks`' six (random; all fill; fill first, then
    not; -0.0 first, then fill; NaN first; fill everywhere but the last value), then one
    random with NaN scattered."""
    rng = np.random.default_rng(11)
    scattered = rng.uniform(-2, 2, (1, SIDE, SIDE)).astype("f4")
    scattered[rng.random(scattered.shape) < 0.1] = np.nan
    return np.concatenate([fill_chunks(fill, SIDE), scattered])


def _chunks(store, prefix: str = "a/c/") -> dict[str, bytes]:
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    async def read() -> dict[str, bytes]:
        keys = [k async for k in store.list_prefix(prefix)]
        got = {}
        for k in keys:
            buf = await store.get(k, prototype=default_buffer_prototype())
            got[k] = buf.to_bytes()
        return got

    return asyncio.run(read())


@pytest.mark.parametrize("fill", [0.0, float("nan")])
@pytest.mark.parametrize("empty", [False, True])
def test_whole_large_chunks_are_stored_as_zarr_stores_them(tmp_path, fill, empty):
    values = _values(fill)
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    plain = zarr.storage.MemoryStore()
    config = {"write_empty_chunks": empty}
    for store in (s.store, plain):
        zarr.create_array(
            store,
            name="a",
            shape=values.shape,
            chunks=(1, SIDE, SIDE),
            dtype="f4",
            fill_value=fill,
            config=config,
        )[...] = values
    s.commit("values")
    stored = _chunks(repo.readonly_session("main").store)
    want = _chunks(plain)
    assert stored == want  # the same keys, the same bytes
    assert ("a/c/1/0/0" in stored) is empty  # the all-fill chunk, left out unless asked
    spec = Spec("a", values.shape, (1, SIDE, SIDE), "f4", fill)
    assert_matches(repo.chunk_stats("a"), spec, values)  # numpy's, chunk by chunk
    repo.close()


def test_only_whole_large_chunks_leave_zarrs_encode(tmp_path, monkeypatch):
    """An array whose last chunk is cut by its edge: zarr's pipeline encodes that chunk
    alone (its per-chunk `encode_batch`), the whole ones are encoded on the encoding
    threads; both read back as written."""
    encoded: list[int] = []
    original = SessionPipeline.encode_batch

    async def spy(self, items):
        items = list(items)
        encoded.append(len(items))
        return await original(self, items)

    monkeypatch.setattr(SessionPipeline, "encode_batch", spy)
    values = np.random.default_rng(3).random((5, SIDE, SIDE + 10), dtype="f4")
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=values.shape, chunks=(1, SIDE, SIDE), dtype="f4"
    )
    arr[...] = values
    assert sum(encoded) == 5  # the five edge chunks of (1, SIDE, 10) only
    s.commit("values")
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[...]
    assert np.array_equal(got, values)
    repo.close()


def test_an_encoders_error_fails_the_write_with_nothing_uploaded(tmp_path, monkeypatch):
    base = zl.Repo.create(tmp_path / "repo")
    repo, blobs, meta = counted(base)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=(12, SIDE, SIDE), chunks=(1, SIDE, SIDE), dtype="f4"
    )
    uploads = uploads_partition(repo._context, s.id)
    meta.writes.clear()
    blobs.calls.clear()
    calls: list[int] = []
    original = ZstdCodec._encode_sync

    def fails(self, chunk, spec):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("zstd failed")
        return original(self, chunk, spec)

    monkeypatch.setattr(ZstdCodec, "_encode_sync", fails)
    with pytest.raises(RuntimeError, match="zstd failed"):
        arr[...] = np.random.default_rng(4).random((12, SIDE, SIDE), dtype="f4")
    assert meta.writes[uploads] == 0
    assert blobs.calls["put"] + blobs.calls["put_if_absent"] == 0
    assert s._engine.lookup("a/c/0/0/0") is None
    repo.close()
