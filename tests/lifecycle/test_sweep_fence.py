"""The fence on a collector's deletes (vc/sweep_fence.py). A collector stopped inside a delete
batch, after its last check of its lease and lock, past its sweep's lease: a writer ends the
sweep in its place (sealing the fence), deduplicates against an object of that batch and
commits; when the collector resumes, its deletes take no effect. On a local directory (a
rename into the sweep's bin, which the seal took away) and on S3 (DeleteObject If-Match the
entity tag the batch recorded, which the seal changed; moto implements it). Review finding:
"gc stopped inside a delete batch deletes a committed dedup hit" (before the fix the writer
ended the sweep by its own clock and the collector's delete landed after the commit).

The collector runs in a thread held at its deleter; the writer's repository sees the
metastore's clock past the sweep's lease, as it is after a long pause."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.lifecycle import fsck
from zarrlake.lifecycle.gc import collect
from zarrlake.storage import open_storage
from zarrlake.vc.gc_protocol import SWEEP_LEASE, GcState
from zarrlake.vc.sweep_fence import Fence, FencedDeletes, SweepEnded, seal

N = 4096  # float64: a 32 KiB chunk, stored as its own object
B = np.random.default_rng(7).random(N)


@pytest.fixture(params=["local", "s3"])
def where(request, tmp_path) -> tuple[str, dict]:
    if request.param == "local":
        return str(tmp_path / "repo"), {}
    return request.getfixturevalue("s3_location")


def _repo_with_garbage(location: str, options: dict) -> zl.Repo:
    """An array, and an abandoned session's chunk object holding B (a gc candidate)."""
    repo = zl.Repo.create(location, storage_options=options)
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(4 * N,), chunks=(N,), dtype="f8")
    s.commit("create a")
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[0:N] = B
    s.flush()
    s.abandon()
    return repo


def test_a_collector_stopped_in_its_delete_batch_deletes_nothing_committed_meanwhile(where):
    location, options = where
    repo = _repo_with_garbage(location, options)
    held, resume = threading.Event(), threading.Event()
    outcome: list[object] = []

    def paused(batch: FencedDeletes) -> list[str]:
        held.set()  # its lease and lock were checked: the deletes would go out now
        resume.wait(60)
        return batch.run(repo._context.object_store)

    def collector() -> None:
        try:
            outcome.append(collect(repo._context, timedelta(0), deleter=paused))
        except Exception as e:  # the fence may stop it: either way it deletes nothing
            outcome.append(e)

    gc = threading.Thread(target=collector)
    gc.start()
    try:
        assert held.wait(60)
        writer = zl.Repo.open(location, storage_options=options)
        real = writer._context.clock
        writer._context.clock = lambda: real() + SWEEP_LEASE + 5  # the collector's pause
        s = writer.create_session()
        zarr.open_array(s.store, path="a")[N : 2 * N] = B  # a dedup hit on the garbage
        committed = s.commit("reuses the garbage chunk's bytes")
    finally:
        resume.set()
        gc.join(60)
    (report,) = outcome
    assert isinstance(report, SweepEnded) or report.objects_deleted == 0
    assert repo.resolve("main") == committed
    got = zarr.open_array(
        zl.Repo.open(location, storage_options=options).readonly_session().store, path="a"
    )
    assert np.array_equal(got[N : 2 * N], B)
    assert fsck(repo) == []
    assert not GcState(repo._context).phase()[0].sweeping


def test_the_seal_stops_a_batch_wherever_the_collector_stopped(where):
    """Each step of a batch (tags read, batch recorded, fence checked, deletes sent), the
    seal coming between: what the collector deletes after the seal is nothing. What it
    deleted before stays deleted on S3 (whoever needs it writes it again); a directory's
    seal puts back all its bin holds."""
    location, options = where
    store = open_storage(location, **options)
    keys = [f"chunks/{i:064x}" for i in range(4)]
    for key in keys:
        store.put(key, key.encode())
    fence = Fence(store, "000000000001")
    fence.open()
    first = fence.prepare(keys[:2])
    assert sorted(fence.delete(first)) == keys[:2]  # before the seal: deleted
    second = fence.prepare(keys[2:])
    seal(store, "000000000001", {**first.tags, **second.tags})
    try:
        deleted = fence.delete(second)
    except SweepEnded:
        deleted = []
    assert deleted == []
    before = store.url.startswith("file://")
    assert [store.exists(k) for k in keys] == [before, before, True, True]
    fence.close()


def test_a_same_bytes_upload_keeps_its_tag_and_a_retag_changes_it(s3_location):
    """S3 gives bytes written again the same way the same entity tag (MD5): a conditional
    delete cannot tell a re-upload from the object it read. `retag` writes them the other
    way (in parts), so the tag changes and a delete holding the old one is refused."""
    location, options = s3_location
    store = open_storage(location, **options)
    store.put("chunks/x", b"bytes")
    tag = store.tag("chunks/x")
    store.put("chunks/x", b"bytes")
    assert store.tag("chunks/x") == tag
    new = store.retag("chunks/x")
    assert new != tag and store.tag("chunks/x") == new
    assert store.delete_if("chunks/x", tag) is False
    assert store.get("chunks/x") == b"bytes"
    assert store.retag("chunks/x") not in (new, None)  # and back, in one part
    assert store.delete_if("chunks/x", store.tag("chunks/x")) is True
    assert not store.exists("chunks/x")


def test_a_sweep_does_not_delete_on_a_store_that_ignores_if_match():
    """A store that deletes whatever tag a conditional delete names would leave the fence
    open: a sweep checks first, and refuses."""
    from zarrlake.errors import ConfigurationError
    from zarrlake.storage.base import WrapperObjectStore

    class Ignores(WrapperObjectStore):
        def delete_if(self, key: str, tag: str) -> bool:
            self.inner.delete(key)
            return True

    store = Ignores(open_storage("memory://ignores-if-match"))
    with pytest.raises(ConfigurationError, match="ignores If-Match"):
        Fence(store, "000000000001").open()
    assert list(store.list("gc-sweeps/")) == []  # the probe is gone
    Fence(open_storage("memory://honours-if-match"), "000000000001").open()
