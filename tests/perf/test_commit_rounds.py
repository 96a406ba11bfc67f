"""The one-chunk commit's round trips on a remote metastore (issue 34): the handle's final
flush goes out with the seal, not before it, and the fence (the session record's attempt)
with the commit's objects, not after them, so the commit call waits for two round trips
less; a batch's first upload sends its marker with its upload record, one round trip less
before the upload. Each test holds one write until the other has started: code that made
them one after the other would never start the second."""

from __future__ import annotations

import threading
from collections.abc import Iterable

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.counting import CountingMetaStore, CountingObjectStore
from zarrlake.connection import RepoContext


class HeldFlush(CountingMetaStore):
    """Holds a write of staged records (the final flush) until a session record's
    compare-and-swap (the seal) has begun, and notes whether it had."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.armed = False
        self.sealing = threading.Event()
        self.overlapped: list[bool] = []

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        if self.armed and partition.endswith("/sessions"):
            self.sealing.set()
        return super().set_if(partition, key, value, expected)

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        if self.armed and "/stage/" in partition:
            self.overlapped.append(self.sealing.wait(10))
        super().set_many(partition, items)


def _with_array(where: dict) -> zl.Repo:
    """A new repository holding array `a` of four 16 KiB chunks (none written)."""
    base = zl.Repo.create(**where)
    s = base.create_session("main")
    zarr.create_array(s.store, name="a", shape=(4, 64, 64), chunks=(1, 64, 64), dtype="f4")
    s.commit("array a")
    return base


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_the_final_flush_goes_out_with_the_seal(any_metastore: dict) -> None:
    base = _with_array(any_metastore)
    meta = HeldFlush(base.context.meta)
    ctx = base.context
    repo = zl.Repo(
        RepoContext(ctx.spec, ctx.repo_id, ctx.object_store, meta, hash=ctx.hash, format=ctx.format)
    )
    s = repo.create_session("main")
    value = np.random.default_rng(1).random((64, 64), dtype=np.float32)
    zarr.open_array(s.store, path="a")[1] = value  # buffered: the commit flushes it
    meta.armed = True
    s.commit("one chunk")
    meta.armed = False
    assert meta.overlapped == [True]
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[1]
    assert np.array_equal(got, value)
    repo.close()


class SecondSwap(CountingMetaStore):
    """Notes when the second session-record compare-and-swap after `armed` was set begins
    (a commit's first is its seal, the second its fence)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.armed = False
        self.swaps = 0
        self.fencing = threading.Event()

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        if self.armed and partition.endswith("/sessions"):
            self.swaps += 1
            if self.swaps == 2:
                self.fencing.set()
        return super().set_if(partition, key, value, expected)


class HeldRecord(CountingObjectStore):
    """Holds the write of a commit record (in the commit's last round of objects) until the
    fence has begun, and notes whether it had."""

    def __init__(self, inner, meta: SecondSwap) -> None:
        super().__init__(inner)
        self.meta = meta
        self.overlapped: list[bool] = []

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if self.meta.armed and key.startswith("commits/"):
            self.overlapped.append(self.meta.fencing.wait(10))
        return super().put_if_absent(key, data)


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_the_fence_goes_out_with_the_commit_objects(any_metastore: dict) -> None:
    base = _with_array(any_metastore)
    ctx = base.context
    meta = SecondSwap(ctx.meta)
    blobs = HeldRecord(ctx.object_store, meta)
    repo = zl.Repo(
        RepoContext(ctx.spec, ctx.repo_id, blobs, meta, hash=ctx.hash, format=ctx.format)
    )
    s = repo.create_session("main")
    value = np.random.default_rng(2).random((64, 64), dtype=np.float32)
    zarr.open_array(s.store, path="a")[2] = value
    meta.armed = True
    commit = s.commit("one chunk")
    assert blobs.overlapped == [True]
    assert meta.swaps == 2  # seal, fence: the record's finish goes out after the call
    assert next(c.id for c in repo.log("main")) == commit
    info = repo.session_info(s.id)
    assert (info.state, info.committed_as) == ("committed", commit)
    meta.armed = False
    assert meta.swaps == 3  # and the record committed: none added
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[2]
    assert np.array_equal(got, value)
    repo.close()


class HeldMarker(CountingMetaStore):
    """Holds a batch's unflushed-writes marker (its first write of staged records) until
    the upload record of its first chunk has begun, and notes whether it had."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.armed = False
        self.recording = threading.Event()
        self.overlapped: list[bool] = []

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        if self.armed and "/uploads/" in partition:
            self.recording.set()
        if self.armed and "/stage/" in partition and not self.overlapped:
            self.overlapped.append(self.recording.wait(10))
        super().set_many(partition, items)


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_the_marker_goes_out_with_the_upload_record(any_metastore: dict) -> None:
    base = _with_array(any_metastore)
    ctx = base.context
    meta = HeldMarker(ctx.meta)
    repo = zl.Repo(
        RepoContext(ctx.spec, ctx.repo_id, ctx.object_store, meta, hash=ctx.hash, format=ctx.format)
    )
    s = repo.create_session("main")
    array = zarr.open_array(s.store, path="a")
    value = np.random.default_rng(3).random((64, 64), dtype=np.float32)
    meta.armed = True
    array[3] = value  # a chunk object: marker, gc phase and upload record, then the upload
    meta.armed = False
    assert meta.overlapped == [True]
    s.commit("one chunk")
    got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[3]
    assert np.array_equal(got, value)
    repo.close()
