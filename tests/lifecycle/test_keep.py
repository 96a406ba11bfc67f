"""History operations that point at an old commit while gc or expire runs (vc/keep.py):
the ref lands only on a whole commit, and expire takes back what a new ref keeps.

Formerly the simulator's known issue `old-targets`; tests/sim/test_former_issues.py replays
its seeds."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck
from zarrlake._util import crashpoints, runtime
from zarrlake.vc.gc_protocol import GcState
from zarrlake.vc.gc_protocol import partition as gc_partition
from zarrlake.vc.keep import KEEP, kept
from zarrlake.vc.reach import EXPIRED_PREFIX
from zarrlake.vc.refs import Refs


def two_commits(repo: zl.Repo) -> tuple[str, str]:
    """(a commit no ref keeps: a deleted branch's head, main's head)."""
    s = repo.create_session()
    s.write("a/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    head = s.commit("main")
    repo.create_branch("tmp", at=head)
    s = repo.create_session("tmp")
    s.write("a/blob", chunk(2))
    old = s.commit("on tmp")
    repo.delete_branch("tmp")
    return old, head


def test_a_ref_made_while_a_sweep_deleted_its_commit_is_refused(repo, monkeypatch):
    old, _ = two_commits(repo)
    ctx = repo._context
    state = GcState(ctx)
    state.acquire()
    phase = state.begin_sweep()  # a sweep that re-checked before the tag's record existed
    waiting = threading.Event()

    def reached(point: str) -> None:
        if point == crashpoints.WAIT_POINT:
            waiting.set()

    monkeypatch.setattr(crashpoints, "reached", reached)
    outcome: list[BaseException | str] = []

    def tag() -> None:
        try:
            outcome.append(repo.create_tag("restored", at=old))
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=tag)
    t.start()
    assert waiting.wait(30)  # the tag's record is written; it waits for the sweep
    assert kept(ctx) == {old}
    snapshot = repo._context.objects.read_commit(old).snapshot
    ctx.object_store.delete(f"snapshots/{snapshot}")  # the sweep deletes a dead object
    state.end_sweep(phase)
    state.release()
    t.join(30)
    assert isinstance(outcome[0], zl.NotFoundError), outcome
    assert "garbage collection deleted objects of commit" in str(outcome[0])
    assert "restored" not in repo.list_tags()  # nothing was changed
    assert not list(ctx.meta.scan(ctx.partition("gc"), prefix=KEEP))  # the record is gone


def test_a_ref_made_while_a_sweep_spared_its_commit_lands(repo, monkeypatch):
    old, _ = two_commits(repo)
    state = GcState(repo._context)
    state.acquire()
    phase = state.begin_sweep()
    waiting = threading.Event()
    monkeypatch.setattr(
        crashpoints, "reached", lambda p: waiting.set() if p == crashpoints.WAIT_POINT else None
    )
    t = threading.Thread(target=repo.create_branch, args=("restored", old))
    t.start()
    assert waiting.wait(30)
    state.end_sweep(phase)
    state.release()
    t.join(30)
    assert repo.list_branches()["restored"] == old
    repo.gc(older_than=timedelta(0), full=True)
    assert fsck(repo) == []


def test_a_running_operation_keeps_its_commit_from_a_sweep(repo):
    old, _ = two_commits(repo)
    objects = repo._context.objects
    snapshot = objects.read_commit(old).snapshot
    from zarrlake.vc.keep import keeping

    with keeping(repo._context, [old]):
        report = repo.gc(older_than=timedelta(0), full=True)
        assert repo._context.object_store.exists(f"snapshots/{snapshot}")
    assert report.objects_deleted >= 0
    repo.gc(older_than=timedelta(0), full=True)  # the record gone, the old commit goes
    assert not repo._context.object_store.exists(f"snapshots/{snapshot}")


def test_a_tag_at_an_expired_commit_is_refused(repo):
    old, _ = two_commits(repo)
    ctx = repo._context
    ctx.object_store.put(f"{EXPIRED_PREFIX}{old}", b'{"expired_at": 1.0, "cutoff": 1.0}')
    with pytest.raises(zl.ExpiredHistoryError, match="dropped by expire"):
        repo.create_tag("late", at=old)
    assert "late" not in repo.list_tags()


def test_expire_takes_back_the_marker_of_a_commit_a_new_ref_points_at(repo, monkeypatch):
    s = repo.create_session()
    s.write("a/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    s.commit("one")
    s = repo.create_session()
    s.write("a/blob", chunk(2))
    s.commit("two")
    doomed = [c.id for c in repo.log()[1:]]  # all but the head are old enough to expire
    ctx = repo._context
    clock = ctx.clock  # two hours pass: the metastore's clock and history's (this process's)
    monkeypatch.setattr(ctx, "clock", lambda: clock() + 7200)
    later = runtime.use(replace(runtime.REAL, now=lambda: runtime.REAL.now() + 7200))

    def reached(point: str) -> None:  # a ref made after expire read the refs, before its
        if point == "expire_after_markers":  # markers: its own check found none
            ctx.refs.create("branch", "restored", doomed[0])

    monkeypatch.setattr(crashpoints, "reached", reached)
    try:
        report = repo.expire(timedelta(hours=1))
    finally:
        runtime.reset(later)
    monkeypatch.undo()
    assert report.commits_expired == len(doomed) - 1  # the one a ref now keeps is taken back
    assert not ctx.object_store.exists(f"{EXPIRED_PREFIX}{doomed[0]}")
    assert ctx.object_store.exists(f"{EXPIRED_PREFIX}{doomed[1]}")
    repo.gc(older_than=timedelta(0), full=True)
    assert fsck(repo) == []
    assert repo.log("restored")[0].id == doomed[0]


def test_an_operation_whose_record_lapsed_refuses_a_commit_a_sweep_broke(repo, monkeypatch):
    """A revert paused past its keep record (gc deleted the lapsed record), while a sweep
    deleted an object its new commit reused: the fence admits the operation again and
    checks the commit it lands, not only the commits it started from (simulator seed 46029
    on the bucket metastore: a merge commit's change set went missing)."""
    s = repo.create_session()
    s.write("a/blob", chunk(1))
    s.commit("one")
    s = repo.create_session()
    s.write("a/blob", chunk(2))
    second = s.commit("two")
    ctx = repo._context
    move = Refs.move

    def lapsed_then_move(self, name, commit_id, expected_version, landing=None):
        part = gc_partition(ctx)
        ctx.meta.set_many(part, [(k, None) for k, _, _ in ctx.meta.scan(part, prefix=KEEP)])
        ctx.object_store.delete(f"changes/{ctx.objects.read_commit(commit_id).changes}")
        return move(self, name, commit_id, expected_version, landing)

    monkeypatch.setattr(Refs, "move", lapsed_then_move)
    with pytest.raises(zl.NotFoundError, match="nothing was changed"):
        repo.revert(second)
    assert repo.resolve("main") == second  # what it wrote is left for gc to find
    assert repo.readonly_session().read("a/blob") == chunk(2)
