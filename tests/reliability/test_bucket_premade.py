"""A premade commit (txn/commit.py `Premade`) sends its objects with the gather, before it
knows whether a sweep that began before its seal is still deleting. Such a sweep may hold
one of the commit's content-addressed keys as a dead candidate: here the change set of a
commit a reset dropped, which a new one-chunk write of the same chunk makes again. The
premade PUT finds it present, the sweep deletes it, and the commit must put it back
before its branch swap, or the branch names a change set that is gone. Deterministic: the
sweep begins right before the seal and deletes right after the premade objects went out
(a real collector's `GcState`, its lock and phase)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake._util import crashpoints
from zarrlake.txn import commit
from zarrlake.vc.gc_protocol import GcState

CHUNK = (64, 64)  # 16 KiB of float32: uploaded, so the write reads the gc phase


def _value(i: int) -> np.ndarray:
    return np.random.default_rng(i).random(CHUNK, dtype=np.float32)


def test_a_premade_object_a_sweep_deleted_is_put_back_before_the_swap(
    s3_location, monkeypatch: pytest.MonkeyPatch
) -> None:
    location, options = s3_location
    repo = zl.Repo.create(location, storage_options=options)
    ctx = repo._context
    s = repo.create_session("main")
    zarr.create_array(s.store, name="a", shape=(4, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    base = s.commit("array a")
    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[0] = _value(0)
    dropped = s.commit("dropped by the reset")
    repo.reset_branch("main", base)
    same = f"changes/{ctx.objects.read_commit(dropped).changes}"

    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[0] = _value(1)  # the same chunk: the same change set
    state = GcState(ctx)
    state.acquire()
    sweeps = []
    original_seal, original_reached = commit.seal, crashpoints.reached

    def seal(txn, rec, version):  # a sweep begins before the seal: it sees the session open
        sweeps.append(state.begin_sweep())
        return original_seal(txn, rec, version)

    written = []

    def reached(point: str) -> None:
        if point == "after_objects_written":
            written.append(point)
            if len(written) == 1:  # the premade objects went out: the sweep deletes its
                assert ctx.object_store.exists(same)  # candidate, then ends
                ctx.object_store.delete(same)
                assert state.end_sweep(sweeps[0])
        original_reached(point)

    monkeypatch.setattr(commit, "seal", seal)
    monkeypatch.setattr(crashpoints, "reached", reached)
    ours = s.commit("the same chunk again")
    monkeypatch.undo()
    state.release()

    assert written == ["after_objects_written"]  # premade, landed without a rebuild
    assert ctx.objects.read_commit(ours).changes == same.removeprefix("changes/")
    assert ctx.object_store.exists(same)  # put back before the swap
    assert repo.fsck() == []
    check = zl.Repo.open(location, storage_options=options)
    got = zarr.open_array(check.readonly_session("main").store, path="a", mode="r")[:2]
    assert np.array_equal(got[0], _value(1)) and not got[1].any()
    check.close()
    repo.close()
