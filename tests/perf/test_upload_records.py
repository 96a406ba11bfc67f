"""The upload records of a zarr write (real SQLite): the objects of one array write's large
chunks are recorded in the session's uploads partition in one metastore write before any
is uploaded, however many chunks; a write past `HOLD_MAX` bytes takes a few; a chunk that
zarr writes alone, and a `set` outside an array write, are recorded too."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import zarrlake as zl
from tests.core.counting import counted
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.vc.gc_protocol import uploads_partition
from zarrlake.zarr_store import write_scope

ROWS, SIDE = 48, 128  # 48 chunks of 64 KiB, each above Settings.stage_inline_max


def _data(seed: int, rows: int = ROWS) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, SIDE, SIDE), dtype="f4")


def _setup(tmp_path):
    base = zl.Repo.create(tmp_path / "repo")
    repo, blobs, meta = counted(base)
    s = repo.create_session()
    arr = zarr.create_array(
        s.store,
        name="a",
        shape=(ROWS, SIDE, SIDE),
        chunks=(1, SIDE, SIDE),
        dtype="f4",
        compressors=None,
    )
    return repo, s, arr, blobs, meta


def _recorded(repo: zl.Repo, s: zl.Session) -> set[str]:
    partition = uploads_partition(repo._context, s.id)
    return {item[0].decode() for item in repo._context.meta.scan(partition)}


def _chunk_objects(repo: zl.Repo, s: zl.Session, rows: range) -> set[str]:
    """The object keys of the staged chunks `rows` of array a."""
    refs = [s._engine.lookup(f"a/c/{r}/0/0") for r in rows]
    return {chunk_object_key(ref.digest) for ref in refs}


def test_one_records_write_for_a_zarr_write_of_many_chunks(tmp_path) -> None:
    repo, s, arr, blobs, meta = _setup(tmp_path)
    uploads = uploads_partition(repo._context, s.id)
    meta.writes.clear()
    blobs.calls.clear()
    data = _data(1)
    arr[...] = data
    assert meta.writes[uploads] == 1  # before: one per chunk (48), a few when they met
    assert blobs.calls["put"] + blobs.calls["put_if_absent"] >= ROWS
    assert _recorded(repo, s) == _chunk_objects(repo, s, range(ROWS))
    one = _data(2, 1)[0]
    arr[5] = one  # zarr writes one chunk: recorded alone, first
    assert meta.writes[uploads] == 2
    assert _chunk_objects(repo, s, range(5, 6)) <= _recorded(repo, s)
    s.commit("many")
    data[5] = one
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[...]
    assert np.array_equal(got, data)
    repo.close()


def test_a_write_past_the_hold_limit_records_a_few_times(tmp_path, monkeypatch) -> None:
    """At most about HOLD_MAX bytes are held or being sent: here 8 chunks, sent once 4
    are held (while one batch is sent, the next is held, and the `set`s zarr has in
    progress add theirs), so 48 take a few writes, at most 13."""
    monkeypatch.setattr(write_scope, "HOLD_MAX", 8 * SIDE * SIDE * 4)
    held: list[int] = []
    hold = write_scope.WriteScope.hold

    def watched(self, store, send, item) -> bool:
        done = hold(self, store, send, item)
        held.append(self.bytes + self.sending)
        return done

    monkeypatch.setattr(write_scope.WriteScope, "hold", watched)
    repo, s, arr, _, meta = _setup(tmp_path)
    uploads = uploads_partition(repo._context, s.id)
    meta.writes.clear()
    data = _data(3)
    arr[...] = data
    concurrency = zarr.config.get("async.concurrency")
    assert ROWS // (8 + concurrency) <= meta.writes[uploads] <= ROWS // 4 + 1
    assert max(held) <= write_scope.HOLD_MAX + concurrency * SIDE * SIDE * 4
    assert _recorded(repo, s) == _chunk_objects(repo, s, range(ROWS))
    s.commit("held")
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[...]
    assert np.array_equal(got, data)
    repo.close()


def test_a_set_outside_an_array_write_is_recorded_before_it_returns(tmp_path) -> None:
    repo, s, arr, _, meta = _setup(tmp_path)
    uploads = uploads_partition(repo._context, s.id)
    meta.writes.clear()
    chunk = _data(4, 1)[0]
    buf = default_buffer_prototype().buffer.from_bytes(chunk.tobytes())
    sync(s.store.set("a/c/7/0/0", buf))
    assert meta.writes[uploads] == 1
    assert _chunk_objects(repo, s, range(7, 8)) == _recorded(repo, s)
    assert np.array_equal(arr[7], chunk)
    repo.close()


def test_a_failed_write_uploads_nothing_it_held(tmp_path, monkeypatch) -> None:
    """An array write that raises before its end sends none of its held chunks: nothing
    recorded, nothing uploaded, nothing staged."""
    repo, s, arr, blobs, meta = _setup(tmp_path)
    uploads = uploads_partition(repo._context, s.id)
    meta.writes.clear()
    blobs.calls.clear()
    from zarr.core.codec_pipeline import BatchedCodecPipeline

    original = BatchedCodecPipeline.write

    async def fails_after(self, batch_info, value, drop_axes=()):
        await original(self, batch_info, value, drop_axes)
        raise RuntimeError("encoder failed")

    monkeypatch.setattr(BatchedCodecPipeline, "write", fails_after)
    with pytest.raises(RuntimeError, match="encoder failed"):
        arr[...] = _data(5)
    assert meta.writes[uploads] == 0
    assert blobs.calls["put"] + blobs.calls["put_if_absent"] == 0
    assert s._engine.lookup("a/c/0/0/0") is None
    repo.close()


def test_zarr_encodes_on_while_a_batch_is_sent_and_a_failed_send_fails_the_write(
    tmp_path, monkeypatch
) -> None:
    """A batch is sent in the background: with zarr encoding one chunk at a time, the
    next chunk is handed over while a batch is being sent (each send here waits for
    that, or gives up after a while: the write sent in the foreground would never
    hand one over). A send that fails makes the write raise its error, and no send is
    left running once the write returned."""
    import asyncio

    from zarrlake.zarr_store.store import SessionStore

    monkeypatch.setattr(write_scope, "HOLD_MAX", 8 * SIDE * SIDE * 4)
    repo, s, arr, _, _ = _setup(tmp_path)
    sending: list[asyncio.Event] = []
    during: list[int] = []  # chunks handed over while a send was in flight
    sent: list[int] = []
    fails: list[int] = []
    hold, send = write_scope.WriteScope.hold, SessionStore._send

    def watched(self, store, send_, item) -> bool:
        if sending:
            during.append(1)
            sending[-1].set()
        return hold(self, store, send_, item)

    async def sends(self, held) -> None:
        handed = asyncio.Event()
        sending.append(handed)
        try:
            if fails and len(sent) == fails[0]:
                raise OSError("disk full")
            if not sent:  # (a guard against a hang, not a wait for time to pass)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handed.wait(), 30)
            await send(self, held)
            sent.append(len(held))
        finally:
            sending.pop()

    monkeypatch.setattr(write_scope.WriteScope, "hold", watched)
    monkeypatch.setattr(SessionStore, "_send", sends)
    data = _data(7)
    with zarr.config.set({"async.concurrency": 1}):
        arr[...] = data
    assert sum(sent) == ROWS and len(sent) >= 6
    assert during  # (sent in the foreground, no chunk is handed over during a send)
    s.commit("sent")
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[...]
    assert np.array_equal(got, data)

    s = repo.create_session()
    arr = zarr.open_array(s.store, path="a")
    sent.clear()
    fails.append(1)  # the second send fails
    with pytest.raises(OSError, match="disk full"):
        arr[...] = _data(8)
    assert sending == []
    assert sent
    repo.close()
