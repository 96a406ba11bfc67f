"""A commit record a gc run keeps stays whole (soak seed 1004066): when a dropped commit's
candidate record is younger than those of its snapshot and change set (it was registered
again), the run that leaves the record for later keeps what it names too, so a branch made
at it afterwards reads every object (real SQLite metastore, local object store)."""

from __future__ import annotations

from datetime import timedelta

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.format.digest import DEFAULT, digest
from zarrlake.vc.gc_protocol import GcState

HOUR = timedelta(hours=1)


def test_a_kept_commit_record_keeps_its_snapshot_and_change_set(repo: zl.Repo) -> None:
    now = [1_000_000.0]
    repo._context.clock = lambda: now[0]
    repo.create_branch("dev")
    s = repo.create_session("dev")
    s.write("a/c/0", chunk(7))
    dropped = s.commit("on dev only")
    s.wait()
    repo.reset_branch("dev", "main")  # the commit is dropped: a gc candidate from now

    now[0] += 30 * 60.0
    first = repo.gc(HOUR)  # the commit waits; what it names is registered as it is found
    assert first.objects_deleted == 0
    state = GcState(repo._context)
    assert {f"commits/{dropped}", chunk_object_key(digest(DEFAULT, chunk(7)))} <= set(
        state.candidates()
    )

    now[0] += 50 * 60.0  # a branch made at the commit and deleted again re-registers it
    repo.create_branch("again", dropped)
    repo.delete_branch("again")
    assert state.candidates()[f"commits/{dropped}"].first_seen == now[0]

    now[0] += 20 * 60.0  # what the commit names is past the grace period, its record is not
    second = repo.gc(HOUR)
    assert f"commits/{dropped}" in GcState(repo._context).candidates()
    assert second.objects_deleted == 0  # nothing it names is deleted either

    repo.create_branch("late", dropped)  # finds the record, and no sweep running
    assert fsck(repo) == []
    assert repo.readonly_session("late").read("a/c/0") == chunk(7)

    now[0] += 2 * 3600.0  # once the branch is gone, a later run reclaims all of it
    repo.delete_branch("late")
    now[0] += 2 * 3600.0
    repo.gc(HOUR)
    assert fsck(repo) == []
    assert f"commits/{dropped}" not in set(repo._context.object_store.list("commits/"))
