"""The seams the simulator needs (zarrlake.runtime): the library's clock, sleeps, executor,
timers and process checks come from the runtime in use, the real one by default; and the
simulator runs on another metastore backend as well as on the in-memory one."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import zarrlake as zl
from zarrlake import runtime
from zarrlake.metastore.sqlite import SqliteMetaStore
from zarrlake.testing.sim import Config, run
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
        assert s.expires_at is not None and s.expires_at.timestamp() == 2_000_003_600.0
        assert "_drop_staged" in submitted  # the clean-up after the commit ran on it
    finally:
        runtime.reset(token)


def test_the_simulator_runs_on_another_metastore(tmp_path):
    def sqlite(name, store):
        return SqliteMetaStore(f"sqlite:///{tmp_path}/{name.replace('/', '_')}.sqlite")

    results = [run(Config(seed), meta_factory=sqlite) for seed in range(6)]
    assert all(r.ok for r in results), [r.failure for r in results if not r.ok]
    assert sum(r.commits for r in results) > 6
