"""Helpers of the shard tests: a repository with a sharded array, raw stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

import zarrlake as zl


@pytest.fixture
def repo(tmp_path: Path) -> zl.Repo:
    """A new local repository (SQLite metastore)."""
    return zl.Repo.create(tmp_path / "repo")


def random(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Incompressible float32 values."""
    return np.random.default_rng(seed).random(shape, dtype="f4")


SHAPE, INNER = (8, 16384), (1, 4096)  # 32 inner chunks of 16 KiB in one 512 KiB shard


@pytest.fixture
def stored(tmp_path: Path) -> tuple[zl.Repo, Path, np.ndarray]:
    """(repository, its folder, values) of an array `a` that is one shard, committed."""
    root = tmp_path / "repo"
    repo = zl.Repo.create(root)
    values = random(SHAPE)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=SHAPE, chunks=INNER, shards=SHAPE, dtype="f4", compressors=None
    )
    arr[:] = values
    s.commit("one shard")
    return repo, root, values


def raw_copy(session: zl.Session) -> MemoryStore:
    """Every key of the session, byte for byte, in a plain zarr memory store: what a
    reader of the store's bytes (not zarrlake's zarr integration) sees."""
    store = MemoryStore()
    proto = zarr.core.buffer.default_buffer_prototype()
    for key in session.list_prefix(""):
        data = session.read(key)
        assert data is not None, key
        zarr.core.sync.sync(store.set(key, proto.buffer.from_bytes(bytes(data))))
    return store


def dir_bytes(root: Path, under: str = "") -> int:
    """Bytes of the objects below `root / under` (the SQLite metastore's files, whose
    log grows and shrinks with every transaction, left out)."""
    base = root / under if under else root
    return sum(
        p.stat().st_size
        for p in base.rglob("*")
        if p.is_file() and not p.relative_to(root).parts[0].startswith("metastore")
    )
