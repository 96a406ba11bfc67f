"""The seams the simulator needs (zarrlake._util.runtime): the library's clock, sleeps, executor,
timers and process checks come from the runtime in use, the real one by default; and the
simulator runs on another metastore backend as well as on the in-memory one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import zarrlake as zl
from tests.simulator import Config, run
from zarrlake._util import runtime
from zarrlake._util.retry import RetryPolicy, backoff
from zarrlake.metastore.sqlite import SqliteMetaStore
from zarrlake.txn.staging import Unflushed


def test_the_real_runtime_is_the_default_and_use_swaps_it_for_one_context():
    assert runtime.current() is runtime.REAL
    assert abs(runtime.now() - time.time()) < 5
    fake = replace(runtime.REAL, now=lambda: 1000.0, alive=lambda host, pid: False)
    token = runtime.use(fake)
    try:
        assert runtime.now() == 1000.0
        assert Unflushed("w", "somewhere", 1, 0.0).alive is False
    finally:
        runtime.reset(token)
    assert runtime.current() is runtime.REAL


def test_commit_times_expiry_and_background_work_follow_the_runtime(tmp_path):
    submitted: list[str] = []

    class Inline:
        def map(self, fn, *iterables, **_):
            return iter([fn(*a) for a in zip(*iterables, strict=False)])

        def submit(self, fn, *args, **kwargs):
            from concurrent.futures import Future

            submitted.append(getattr(fn, "__name__", "?"))
            f: Future = Future()
            f.set_result(fn(*args, **kwargs))
            return f

        def shutdown(self, wait=True, **_):
            pass

    fake = replace(runtime.REAL, now=lambda: 2_000_000_000.0, executor=Inline())
    token = runtime.use(fake)
    try:
        repo = zl.Repo.create(tmp_path / "repo")
        s = repo.create_session(expires_in=timedelta(hours=1))
        s.write("a/c/0", b"x")
        cid = s.commit("at a fixed time")
        assert repo.commit_info(cid).timestamp.timestamp() == 2_000_000_000.0
        # a session's expiry is on the metastore's clock (SQLite: this host's), which the
        # other processes using it judge it by, not on this process's
        assert s.expires_at is not None
        assert abs(s.expires_at.timestamp() - (time.time() + 3600)) < 60
        assert "_drop_staged" in submitted  # the clean-up after the commit ran on it
    finally:
        runtime.reset(token)


def test_the_simulator_runs_on_another_metastore(tmp_path):
    def sqlite(name, store):
        return SqliteMetaStore(f"sqlite:///{tmp_path}/{name.replace('/', '_')}.sqlite")

    results = [run(Config(seed), meta_factory=sqlite) for seed in range(6)]
    assert all(r.ok for r in results), [r.failure for r in results if not r.ok]
    assert sum(r.commits for r in results) > 6


@contextlib.contextmanager
def _sleeps() -> Iterator[tuple[list[float], list[float]]]:
    """(clock, waits): the runtime's clock and sleeps, faked: a sleep is noted and moves
    the clock."""
    clock = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock[0] += seconds

    token = runtime.use(replace(runtime.REAL, monotonic=lambda: clock[0], sleep=sleep))
    try:
        yield clock, waits
    finally:
        runtime.reset(token)


def test_compare_and_swap_backoff_waits_and_gives_up_on_the_runtime_clock():
    with _sleeps() as (clock, waits):
        capped = RetryPolicy(attempts=5, base_delay=0.01, max_delay=0.03)
        assert list(backoff(capped)) == [0, 1, 2, 3, 4]
        assert len(waits) == 4 and all(
            0 <= w <= min(0.03, 0.01 * 2**n) for n, w in enumerate(waits, 1)
        )
        waits.clear()
        clock[0] = 0.0
        timed = RetryPolicy(attempts=None, base_delay=1.0, max_delay=1.0, timeout=10.0)
        tried = sum(1 for _ in backoff(timed))
        assert clock[0] > 10.0 and tried == len(waits) + 1


def test_a_backoff_with_a_slot_spreads_its_retries_over_the_attempts_length():
    """A branch swap that lost waits up to the time its attempt took (`slot`), doubling per
    loss, where a base delay of 2 ms alone would have its losers rebuild into each other."""
    with _sleeps() as (_, waits):
        policy = RetryPolicy(attempts=4, base_delay=0.002, max_delay=0.5)
        firsts = []
        for _ in range(50):
            waits.clear()
            assert list(backoff(policy, lambda: 0.2)) == [0, 1, 2, 3]
            assert [w <= b for w, b in zip(waits, (0.2, 0.4, 0.5), strict=True)] == [True] * 3
            firsts.append(waits[0])
        assert max(firsts) > 0.1  # not the base delay's 4 ms
        waits.clear()
        assert list(backoff(policy, lambda: 0.0)) == [0, 1, 2, 3]  # never below the base's
        assert all(0 <= w <= 0.002 * 2**n for n, w in enumerate(waits, 1))
