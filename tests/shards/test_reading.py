"""Readers see a shard stored as inner chunks as a valid shard object with its index;
ranged reads of its index and of one inner chunk fetch only those bytes, verified; a shard
stored whole (as zarrlake did before) reads as it is, and is split when next written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.abc.store import SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore

import zarrlake as zl
from tests.core.test_ranged_reads import reopened
from tests.shards.conftest import random, raw_copy
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.shard import ShardRef

SHAPE, INNER = (8, 16384), (1, 4096)  # 32 inner chunks of 16 KiB in one 512 KiB shard
INNER_BYTES = 4 * INNER[0] * INNER[1]
INDEX_BYTES = 16 * 32 + 4
KEY = "a/c/0/0"


def create(session: zl.Session, values: np.ndarray) -> None:
    arr = zarr.create_array(
        session.store,
        name="a",
        shape=SHAPE,
        chunks=INNER,
        shards=SHAPE,
        dtype="f4",
        compressors=None,
    )
    arr[:] = values


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A shard whose inner chunks lie in its first object but one, rewritten since."""
    repo = zl.Repo.create(tmp_path / "repo")
    values = random(SHAPE)
    s = repo.create_session()
    create(s, values)
    s.commit("shard")
    s = repo.create_session()
    values[2, 4096:8192] = 7
    zarr.open_array(s.store, path="a", mode="r+")[2, 4096:8192] = 7
    s.commit("one inner chunk")
    return tmp_path / "repo", values


def test_readers_get_a_valid_shard(mixed: tuple[Path, np.ndarray]) -> None:
    root, values = mixed
    session = zl.Repo.open(root).readonly_session()
    ref = session._engine.lookup(KEY)
    assert isinstance(ref, ShardRef) and ref.whole is None  # assembled from two objects
    plain = zarr.open_array(raw_copy(session), path="a", mode="r")  # plain zarr, raw bytes
    np.testing.assert_array_equal(plain[:], values)
    assert session.list_prefix("a/") == ["a/c/0/0", "a/zarr.json"]
    assert session.list_dir("a/c/0") == ["0"]
    size = sync(session.store.getsize(KEY))
    assert size == len(session.read(KEY) or b"") == 32 * INNER_BYTES + INDEX_BYTES


def test_ranged_reads_fetch_only_what_is_asked(mixed: tuple[Path, np.ndarray]) -> None:
    root, values = mixed
    repo, rec = reopened(zl.Repo.open(root))
    store = repo.readonly_session().store
    whole = repo.readonly_session().read(KEY)
    assert whole is not None
    rec.reads.clear()
    index = sync(store.get(KEY, default_buffer_prototype(), SuffixByteRequest(INDEX_BYTES)))
    assert index is not None and index.to_bytes() == bytes(whole[-INDEX_BYTES:])
    assert rec.of("chunks/") == []  # the index is made from the entries
    arr = zarr.open_array(store, path="a", mode="r")
    rec.reads.clear()
    np.testing.assert_array_equal(arr[5, 0:4096], values[5, 0:4096])  # in the first object
    assert [n for _, _, n in rec.of("chunks/")] == [INNER_BYTES]
    rec.reads.clear()
    np.testing.assert_array_equal(arr[2, 4096:8192], values[2, 4096:8192])  # its own object
    assert [n for _, _, n in rec.of("chunks/")] == [INNER_BYTES]
    rec.reads.clear()
    np.testing.assert_array_equal(arr[:], values)
    # the first object's inner chunks in one request (the replaced one's gap bridged), the
    # new inner chunk in another
    assert sorted(n for _, _, n in rec.of("chunks/")) == [INNER_BYTES, 32 * INNER_BYTES]


def test_a_corrupt_inner_chunk_fails_only_its_reads(mixed: tuple[Path, np.ndarray]) -> None:
    root, values = mixed
    ref = zl.Repo.open(root).readonly_session()._engine.lookup(KEY)
    assert isinstance(ref, ShardRef)
    part = ref.parts[ref.names.index("5.0")]
    assert part.kind == RefKind.LOCATION and part.location is not None
    path = root / part.location
    raw = bytearray(path.read_bytes())
    raw[part.offset + 100] ^= 1
    path.write_bytes(bytes(raw))
    arr = zarr.open_array(zl.Repo.open(root).readonly_session().store, path="a", mode="r")
    with pytest.raises(zl.CorruptionError, match=r"inner chunk 5\.0"):
        arr[5, 0:4096]
    np.testing.assert_array_equal(arr[6, 0:4096], values[6, 0:4096])


def shard_bytes(values: np.ndarray) -> dict[str, bytes]:
    """The keys plain zarr writes for the array (its zarr.json and its one shard)."""
    store = MemoryStore()
    create_plain = zarr.create_array(
        store, name="a", shape=SHAPE, chunks=INNER, shards=SHAPE, dtype="f4", compressors=None
    )
    create_plain[:] = values
    return {k: v.to_bytes() for k, v in store._store_dict.items()}


def test_a_shard_stored_whole_reads_as_it_is(tmp_path: Path) -> None:
    """As zarrlake stored shards before they were split: one entry holding the shard."""
    repo = zl.Repo.create(tmp_path / "repo")
    values = random(SHAPE)
    written = shard_bytes(values)
    s = repo.create_session()
    s.write(KEY, written[KEY])  # before the array's metadata: stored whole, as it was
    s.write("a/zarr.json", written["a/zarr.json"])
    s.commit("whole")
    session = repo.readonly_session()
    ref = session._engine.lookup(KEY)
    assert isinstance(ref, ChunkRef) and ref.kind == RefKind.OBJECT
    assert session.read(KEY) == written[KEY]
    again, rec = reopened(repo)
    arr = zarr.open_array(again.readonly_session().store, path="a", mode="r")
    np.testing.assert_array_equal(arr[4, 8192:12288], values[4, 8192:12288])
    assert rec.bytes_read("chunks/") <= 3 * 64 * 1024  # through its block table, as before
    # written again, it is split: the other inner chunks keep their bytes
    s = repo.create_session()
    zarr.open_array(s.store, path="a", mode="r+")[0, 0:10] = -1
    s.commit("split")
    values[0, 0:10] = -1
    session = repo.readonly_session()
    assert isinstance(session._engine.lookup(KEY), ShardRef)
    np.testing.assert_array_equal(zarr.open_array(session.store, path="a", mode="r")[:], values)
    old = repo.readonly_session("main~1")
    assert old.read(KEY) == written[KEY]  # history is untouched


def test_one_inner_chunk_of_a_stored_shard_is_one_ranged_read(
    stored: tuple[zl.Repo, Path, np.ndarray],
) -> None:
    """zarr reads the shard's index, then the inner chunk: the index comes from the entries
    (no read), the inner chunk from its block range in the stored shard, in one read."""
    repo, _, values = stored
    again, rec = reopened(repo)
    arr = zarr.open_array(again.readonly_session().store, path="a", mode="r")
    rec.reads.clear()
    np.testing.assert_array_equal(arr[3, 4096:8192], values[3, 4096:8192])
    chunk_reads = rec.of("chunks/")
    assert len(chunk_reads) == 1, chunk_reads
    ((_, byte_range, n),) = chunk_reads
    assert byte_range is not None and n < SHAPE[0] * SHAPE[1] * 4  # a range, not the shard
    end = byte_range[1]
    assert end <= SHAPE[0] * SHAPE[1] * 4  # not the index at the shard's end
    np.testing.assert_array_equal(arr[:], values)  # the whole array still reads back exact


def test_opening_and_reading_one_inner_chunk_reads_its_bytes_and_no_more(
    stored: tuple[zl.Repo, Path, np.ndarray],
) -> None:
    """What a new reader of one inner chunk fetches, object by object: the snapshot, the
    manifest range holding the shard's entries (the index is made from them) and the inner
    chunk's own bytes, checked against its own digest: no block table, no block around it,
    no statistics decoded."""
    repo, _, values = stored
    again, rec = reopened(repo)
    session = again.readonly_session()
    arr = zarr.open_array(session.store, path="a", mode="r")
    np.testing.assert_array_equal(arr[3, 4096:8192], values[3, 4096:8192])
    kinds = sorted(key.split("/")[0] for key, _, _ in rec.reads)
    assert kinds == ["chunks", "manifests", "snapshots"], rec.reads
    ((_, byte_range, n),) = rec.of("chunks/")
    assert n == INNER_BYTES and byte_range is not None and byte_range[1] - byte_range[0] == n
    assert session._txn.view.range(0).has_stats  # the manifest has statistics, left alone
    shard = session._engine.lookup(KEY)
    assert isinstance(shard, ShardRef) and shard.entries.stored_stats is None
