"""A collector paused until its lock was taken over writes no candidate record afterwards:
its candidate writes are guarded by its lock row's version (GcState), so it stops with
GcBusyError instead of registering, dropping or re-dating rows the new collector judges by.
Writers registering candidates (a reset, a session's clean-up) hold no lock and are not
guarded."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.errors import GcBusyError
from zarrlake.vc.gc_protocol import LOCK_TTL, GcState


def rows(repo: zl.Repo) -> dict[str, float]:
    """Every candidate record: object key -> the time its grace period counts from."""
    return {k: c.first_seen for k, c in GcState(repo._context).candidates().items()}


def take_over(repo: zl.Repo) -> GcState:
    """Another collector takes the lock, as one does once the holder's lock went unrenewed
    for LOCK_TTL (its process paused)."""
    ctx = repo._context
    other = GcState(ctx)
    other.clock = lambda: ctx.clock() + LOCK_TTL + 1
    other.acquire()
    return other


def test_a_collector_whose_lock_was_taken_over_registers_nothing(tmp_path: Path) -> None:
    repo = zl.Repo.create(tmp_path / "r")  # SQLite metastore
    s = repo.create_session()
    a = zarr.create_array(s.store, name="a", shape=(2, 8), chunks=(1, 8), dtype="i4")
    old = s.commit("array")
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[0] = 5
    dropped = s.commit("row 0")
    repo.reset_branch("main", old)  # registers the dropped commit as a candidate
    before = rows(repo)
    assert list(before) == [f"commits/{dropped}"]
    taken: list[GcState] = []

    def progress(phase: str, done: int, total: int | None) -> None:
        if phase == "marking" and not taken:  # paused here until its lock was taken over
            taken.append(take_over(repo))

    with pytest.raises(GcBusyError, match="lock was taken over"):
        repo.gc(timedelta(hours=1), progress=progress)
    # Without the guard it registered what the dropped commit reaches (its snapshot,
    # manifest and change set) before finding its lock gone at its sweep.
    assert rows(repo) == before
    # The new collector runs as if the stale one never had: nothing is due yet, its rows
    # are its own; a reset registering a candidate meanwhile (no lock) is not refused.
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[1] = 7
    again = s.commit("row 1")
    repo.reset_branch("main", old)
    assert set(rows(repo)) == {f"commits/{dropped}", f"commits/{again}"}
    taken[0].release()
    report = repo.gc(timedelta(hours=1))
    assert report.objects_deleted == 0 and report.candidates_pending > 2
    assert np.array_equal(zarr.open_array(repo.readonly_session().store, path="a")[:], a[:])
    assert repo.fsck() == []
