"""Which chunk objects get a block table: those a ranged read can use (shards, and objects
whose array is not known), not the chunks of unsharded arrays, which zarr reads whole; a
ranged read of an object without a table still returns verified bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from zarr.abc.store import RangeByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrlake as zl
from zarrlake.format.blocks import PREFIX, TABLE_MIN


def tables(root: Path) -> list[Path]:
    folder = root / PREFIX.rstrip("/")
    return sorted(folder.iterdir()) if folder.exists() else []


def values(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(3).random(shape, dtype=np.float32)


def test_chunks_of_an_unsharded_array_get_no_table(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    data = values((2, 512, 256))  # 512 KiB per chunk, ~460 KB compressed: above TABLE_MIN
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=data.shape, chunks=(1, 512, 256), dtype="f4")[
        ...
    ] = data
    s.commit("unsharded")
    assert tables(tmp_path / "repo") == []
    store = repo.readonly_session().store
    whole = sync(store.get("a/c/1/0/0", default_buffer_prototype()))
    assert whole is not None and len(whole) >= TABLE_MIN
    got = sync(store.get("a/c/1/0/0", default_buffer_prototype(), RangeByteRequest(100, 200)))
    assert got is not None and got.to_bytes() == whole.to_bytes()[100:200]
    reread = zarr.open_array(store, path="a", mode="r")[...]
    assert np.array_equal(reread, data)


def test_shards_get_a_table(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    data = values((2, 512, 256))
    s = repo.create_session()
    zarr.create_array(
        s.store, name="v", shape=data.shape, dtype="f4", chunks=(1, 32, 32), shards=(1, 512, 256)
    )[...] = data
    s.commit("sharded")
    assert len(tables(tmp_path / "repo")) == 2


def test_an_array_made_sharded_in_the_same_session_gets_tables(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    data = values((1, 512, 256))
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=data.shape, chunks=(1, 512, 256), dtype="f4")[
        ...
    ] = data
    assert tables(tmp_path / "repo") == []
    zarr.create_array(
        s.store,
        name="a",
        shape=data.shape,
        dtype="f4",
        chunks=(1, 32, 32),
        shards=(1, 512, 256),
        overwrite=True,
    )[...] = data + 1
    s.commit("resharded")
    assert len(tables(tmp_path / "repo")) == 1
