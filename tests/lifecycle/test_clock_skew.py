"""Clock skew between a writer and a collector: a writer whose clock runs ahead stops
waiting for a sweep only by ending it (compare-and-swap of the phase), and the collector,
which reads the phase before each delete batch, deletes no more."""

from __future__ import annotations

from datetime import timedelta

from tests.helpers.lifecycle import chunk, fsck
from zarrlake.lifecycle.gc import Collector
from zarrlake.vc.gc_protocol import SWEEP_TTL, GcState, WriteGuard


def test_a_writer_ahead_of_the_collectors_clock_ends_the_sweep_it_stops_waiting_for(repo):
    ctx = repo._context
    state = GcState(ctx)
    state.acquire()
    phase = state.begin_sweep()
    assert state.may_delete(phase)
    guard = WriteGuard(ctx)
    guard.clock = lambda: ctx.clock() + SWEEP_TTL + 3600  # an hour ahead of the collector
    guard.wait_idle()
    assert not state.may_delete(phase)  # the collector's next batch stops here
    assert not state.phase()[0].sweeping
    state.end_sweep(phase)  # the collector's own end changes nothing now
    state.release()
    assert state.phase()[0].epoch == phase.epoch and not state.phase()[0].sweeping


def test_a_collector_whose_sweep_was_ended_leaves_a_whole_repository(repo, monkeypatch):
    for i in range(3):
        s = repo.create_session()
        s.write_many([(f"a/c/{j}", chunk(10 * i + j)) for j in range(4)])
        s.commit(f"c{i}")
    repo.reset_branch("main", repo.log()[2].id)  # two commits' chunks become garbage
    ctx = repo._context

    def ended_by_a_writer(self, batch):  # a writer ahead by an hour ends the sweep first
        guard = WriteGuard(ctx)
        guard.clock = lambda: ctx.clock() + SWEEP_TTL + 3600
        guard.wait_idle()
        deleted.extend(batch)
        ctx.object_store.delete_many(batch)

    deleted: list[str] = []

    monkeypatch.setattr(Collector, "_delete", ended_by_a_writer)
    init = Collector.__init__

    def one_at_a_time(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.delete_batch = 1

    monkeypatch.setattr(Collector, "__init__", one_at_a_time)
    report = repo.gc(timedelta(0), full=True)
    monkeypatch.undo()
    assert len(deleted) == 1  # one batch, then the collector stopped
    assert report.objects_deleted == 1
    assert fsck(repo) == []
    assert repo.gc(timedelta(0), full=True).objects_deleted >= 2  # the next run goes on
