"""fsck checks block tables: a chunk object read by range (a shard stored as one object, or a
large chunk of a sharded array stored whole) must have its `blocks/<digest>`; a missing
table, a damaged one, and one whose block digests do not match the object are reported,
naming the table and the object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

import zarrlake as zl
from zarrlake.format.blocks import PREFIX, BlockTable
from zarrlake.storage.base import ObjectStore


def tables(store: ObjectStore) -> list[str]:
    return sorted(store.list(PREFIX))


@pytest.fixture
def one_table(stored: tuple[zl.Repo, Path, np.ndarray]) -> tuple[zl.Repo, str, bytes]:
    """The repository of the one-shard array (one 512 KiB object, its inner chunks ranges of
    it), the key of its one block table and the table's bytes; fsck clean."""
    repo, _, _ = stored
    store = repo._context.object_store
    [key] = tables(store)
    assert repo.fsck() == []
    return repo, key, store.get(key)


def test_a_missing_block_table_is_reported(one_table: tuple[zl.Repo, str, bytes]) -> None:
    repo, key, _ = one_table
    repo._context.object_store.delete(key)
    [problem] = repo.fsck()
    assert (problem.object, problem.kind) == (key, "missing")
    assert f"chunks/{key[len(PREFIX) :]}" in problem.detail
    assert "reads it whole" in problem.detail


def test_a_damaged_block_table_is_reported(one_table: tuple[zl.Repo, str, bytes]) -> None:
    repo, key, raw = one_table
    bad = bytearray(raw)
    bad[40] ^= 0x01
    repo._context.object_store.put(key, bytes(bad))
    [problem] = repo.fsck()
    assert (problem.object, problem.kind) == (key, "corrupt")
    assert "damaged" in problem.detail


def test_block_digests_that_do_not_match_the_object_are_reported(
    one_table: tuple[zl.Repo, str, bytes],
) -> None:
    """A well-formed table of this object (its own checksum right) whose block digests are
    another content's: only comparing them with the object finds it."""
    repo, key, raw = one_table
    obj = f"chunks/{key[len(PREFIX) :]}"
    data = repo._context.object_store.get(obj)
    digest = bytes.fromhex(key[len(PREFIX) :])
    good = BlockTable.build(repo._context.objects.algo, data, digest)
    other = BlockTable.build(good.algo, bytes(len(data)), digest)
    assert good.encode() == raw
    repo._context.object_store.put(key, other.encode())
    [problem] = repo.fsck()
    assert (problem.object, problem.kind) == (key, "corrupt")
    assert "do not match the object" in problem.detail and obj in problem.detail


@pytest.mark.filterwarnings("ignore:Combining a .sharding_indexed. codec")
def test_a_sharded_chunk_stored_whole_needs_its_table_too(tmp_path: Path) -> None:
    """A sharded array whose codecs zarrlake does not split (zstd after the sharding codec):
    its shards are chunk objects of their own, read by range, so their table is checked."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    values = np.random.default_rng(1).random((4, 32768))
    zarr.create_array(
        s.store, name="w", shape=values.shape, dtype="f8", chunks=values.shape,
        serializer=ShardingCodec(chunk_shape=(1, 32768), codecs=[BytesCodec()]),
        compressors=[ZstdCodec(level=0)],
    )[:] = values  # fmt: skip
    s.commit("a shard with zstd outside")
    store = repo._context.object_store
    [key] = tables(store)
    assert repo.fsck() == []
    store.delete(key)
    [problem] = repo.fsck()
    assert (problem.object, problem.kind) == (key, "missing")
