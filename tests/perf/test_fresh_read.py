"""The small path of a read: a session store's small chunks are decoded on zarr's event
loop (no hop to a thread per chunk, and no executor thread started by a new process's
first read), large chunks and other stores keep zarr's own decode on threads; a read-only
view looks a chunk's reference up once per read."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import MemoryStore

import zarrlake as zl
from zarrlake.vc.snapshot_view import SnapshotView
from zarrlake.zarr_store import pipeline


@pytest.fixture
def threaded(monkeypatch) -> list[int]:
    """The chunks zstd decoded through zarr's threaded path (`_decode_single`)."""
    calls: list[int] = []
    real = ZstdCodec._decode_single

    async def counted(self, chunk_bytes, chunk_spec):
        calls.append(len(chunk_bytes))
        return await real(self, chunk_bytes, chunk_spec)

    monkeypatch.setattr(ZstdCodec, "_decode_single", counted)
    return calls


def _written(tmp_path, shape, chunks) -> tuple[zl.Repo, np.ndarray]:
    repo = zl.Repo.create(tmp_path / "repo")
    values = np.random.default_rng(3).random(shape).astype("f4")
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=shape, chunks=chunks, dtype="f4")[...] = values
    s.commit("values")
    return repo, values


def test_small_chunks_of_a_session_store_decode_on_the_loop(tmp_path, threaded) -> None:
    repo, values = _written(tmp_path, (8, 64, 64), (1, 64, 64))  # 16 KiB chunks
    for session in (repo.readonly_session("main"), repo.create_session("main")):
        array = zarr.open_array(session.store, path="a", mode="r")
        assert np.array_equal(array[3], values[3])
        assert np.array_equal(array[...], values)
    assert threaded == []
    repo.close()


def test_large_chunks_and_other_stores_keep_zarrs_threaded_decode(tmp_path, threaded) -> None:
    repo, values = _written(tmp_path, (2, 256, 256), (1, 256, 256))  # 256 KiB chunks
    assert pipeline.INLINE_MAX < 256 * 256 * 4
    array = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")
    assert np.array_equal(array[...], values)
    assert len(threaded) == 2
    repo.close()
    other = zarr.create_array(MemoryStore(), shape=(4, 8), chunks=(1, 8), dtype="f4")
    other[...] = np.arange(32, dtype="f4").reshape(4, 8)
    assert np.array_equal(other[...], np.arange(32, dtype="f4").reshape(4, 8))
    assert len(threaded) == 6  # (a memory store's small chunks: zarr's path, as before)


def test_a_read_only_view_looks_a_chunk_up_once_per_read(tmp_path, monkeypatch) -> None:
    repo, values = _written(tmp_path, (8, 64, 64), (1, 64, 64))
    looked: list[str] = []
    real = SnapshotView.get
    monkeypatch.setattr(
        SnapshotView, "get", lambda self, key, **kw: looked.append(key) or real(self, key, **kw)
    )
    array = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")
    assert np.array_equal(array[5], values[5])
    assert np.array_equal(array[2], values[2])
    assert [k for k in looked if "/c/" in k] == ["a/c/5/0/0", "a/c/2/0/0"]
    repo.close()
