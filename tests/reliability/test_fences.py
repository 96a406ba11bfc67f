"""The second protocol review's findings, one regression test each (besides the delete
fence, tests/lifecycle/test_sweep_fence.py, and the aborted commit and dead collector,
tests/reliability/test_recovery.py). Each failed before its fix.

Processes are stood in for by threads where only one thing about them matters: a thread
whose runtime clock is skewed (`runtime.use`) is a process with a wrong clock; a record
naming a finished process's identity is a committer killed there."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
import zarr

import zarrlake as zl
from tests.reliability.test_recovery import (
    ENV,
    _identity_of_a_finished_process,
    make_repo,
    sessions_in_log,
)
from zarrlake._util import crashpoints, runtime
from zarrlake.errors import ExpiredHistoryError, SessionClosedError, TransientError
from zarrlake.session_records import Status


def _table(repo: zl.Repo, ref: str = "main") -> list[list[int]]:
    return zarr.open_array(repo.readonly_session(ref).store, path="t")[:].tolist()


def _in_thread(
    fn, *, skew: float = 0.0, name: str | None = None
) -> tuple[threading.Thread, list[object]]:
    """Run `fn` in a thread whose runtime clock is `skew` seconds off; its outcome (result
    or exception) lands in the returned list."""
    outcome: list[object] = []

    def run() -> None:
        if skew:
            runtime.use(replace(runtime.REAL, now=lambda: time.time() + skew))
        try:
            outcome.append(fn())
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread, outcome


@contextlib.contextmanager
def _held_at_point(point: str, thread_name: str):
    """Hold the thread named `thread_name` at crash point `point` until released; yields
    (held, release) events."""
    held, release = threading.Event(), threading.Event()
    original = crashpoints.reached

    def reached(name: str) -> None:
        if name == point and threading.current_thread().name == thread_name:
            held.set()
            release.wait(60)
        original(name)

    crashpoints.reached = reached
    try:
        yield held, release
    finally:
        release.set()
        crashpoints.reached = original


def test_a_dead_committers_late_branch_swap_never_lands_after_recovery(tmp_path, pg_metastore_url):
    """Finding 3: a committer's branch swap is on its way (held here inside the metastore
    call, as a network would hold it) when the committer is killed. Recovery finds it dead
    and not landed and reopens the session; a worker's flush is acknowledged; then the
    held swap arrives. Before the fix it landed: the worker's write was in no commit. Now
    recovery revoked the session's landing first, and the swap is refused. On PostgreSQL:
    on SQLite the fence and the swap are one local transaction, which recovery waits for."""
    from zarrlake.metastore.postgres import PostgresMetaStore

    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    held, release = threading.Event(), threading.Event()
    real = PostgresMetaStore._write_if

    def in_flight(self, partition, writes, deletes, checks):
        swap = any(k.startswith(b"branch/") for k, _ in writes)
        if swap and any(k.startswith(b"land/") for k in checks) and not held.is_set():
            held.set()
            release.wait(60)
        return real(self, partition, writes, deletes, checks)

    PostgresMetaStore._write_if = in_flight
    try:
        committer = zl.Repo.open(location, metastore=pg_metastore_url)
        thread, outcome = _in_thread(lambda: committer.join_session(sid).commit("dies"))
        assert held.wait(60)
        dead = _identity_of_a_finished_process()  # as its SIGKILL leaves it
        repo._context.records.update(sid, lambda r: replace(r, committer=dead))
        w = repo.join_session(sid)  # recovery: dead, not landed: open again
        assert w.status == Status.OPEN
        zarr.open_array(w.store, path="t")[1, 1] = 22
        w.flush()  # acknowledged
        release.set()
        thread.join(60)
    finally:
        release.set()
        PostgresMetaStore._write_if = real
    (refused,) = outcome
    assert isinstance(refused, SessionClosedError), refused
    assert _table(repo) == [[0, 0], [0, 0]]  # the late swap did not land
    cid = w.commit("the worker's")
    assert repo.resolve("main") == cid and _table(repo) == [[11, 0], [0, 22]]
    assert sessions_in_log(repo)[sid] == 1


def test_a_committer_whose_clock_runs_behind_is_not_aborted_by_a_gc(tmp_path):
    """Finding 4: a committer whose clock is 180 s behind wrote a lease that had lapsed by
    the clocks of others; an ordinary gc run aborted it mid-commit. Leases are on the
    metastore's clock now, and a live committer on this host is never given up on."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location)
    committer = zl.Repo.open(location)
    with _held_at_point("after_seal", "skewed-committer") as (held, release):
        thread, outcome = _in_thread(
            lambda: committer.join_session(sid).commit("behind"),
            skew=-180.0,
            name="skewed-committer",
        )
        assert held.wait(60)
        repo.gc(timedelta(hours=1))  # settles sessions: recovers overdue committers
        assert repo._context.records.get(sid)[0].status == Status.COMMITTING
        release.set()
        thread.join(60)
    (cid,) = outcome
    assert cid == repo.resolve("main") and _table(repo) == [[11, 0], [0, 0]]
    assert repo.session_info(sid).status == "committed"


def test_a_session_created_across_a_commit_and_an_expire_refuses_its_first_write(tmp_path):
    """Finding 5, as issue 50's lazy session record changes it: create_session reads its
    branch's head B and stores no record, so a commit C and an expire drop B (no record
    names it). Before, gc then deleted B's snapshot under an open session whose record
    named it, and every gc failed while it stayed open. Now the session's first write
    stores its record, finds B's expiry marker after it and refuses (ExpiredHistoryError),
    deleting the record: no record names an expired base, and gc runs clean."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location)
    repo.join_session(sid).abandon()  # its base would keep B anyway
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[0, 0] = 5
    b = s.commit("B")
    session = zl.Repo.open(location).create_session()
    assert session.base_commit == b
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[1, 0] = 7
    s.commit("C")
    repo.expire(timedelta(0))
    assert repo.expired_at(b) is not None
    with pytest.raises(ExpiredHistoryError, match="start a new session") as refused:
        zarr.open_array(session.store, path="t")[1, 1] = 9
    assert refused.value.commit == b
    assert repo.list_sessions() == []
    repo.gc(timedelta(0))
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[1, 1] = 9
    s.commit("on the head")
    assert _table(repo) == [[5, 0], [7, 9]]


def test_a_session_whose_record_is_stored_keeps_its_base_across_a_commit_and_an_expire(
    tmp_path,
):
    """The record is stored at the session's first write, naming its base B; an expire
    after that (here: right after the store, before the write's expiry-marker check) keeps
    B, and the session commits on it. On SQLite the record and the first write are one
    transaction, which an expire cannot come between: it comes right after it."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location)
    repo.join_session(sid).abandon()
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[0, 0] = 5
    b = s.commit("B")
    creator = zl.Repo.open(location)
    session = creator.create_session()
    other = repo.create_session()
    zarr.open_array(other.store, path="t")[1, 0] = 7
    other.commit("C")
    meta = creator._context.meta  # its record's transaction ends here (txn/birth.py)
    commit_batch = meta.commit_batch
    expired: list[bool] = []

    def stored_then_expired() -> None:
        commit_batch()
        if not expired:
            expired.append(True)
            repo.expire(timedelta(0))

    meta.commit_batch = stored_then_expired  # type: ignore[method-assign]
    zarr.open_array(session.store, path="t")[1, 1] = 9
    assert expired and repo.expired_at(b) is None and session.base_commit == b
    repo.gc(timedelta(0))
    assert zarr.open_array(session.store, path="t")[0, 0] == 5  # its base reads
    session.commit("on its base", on_conflict="ours")
    assert _table(repo) == [[5, 0], [7, 9]]


def test_a_seal_whose_reply_was_lost_is_read_back_and_undone(tmp_path):
    """Finding 6: the seal's compare-and-swap landed but its reply was lost past the
    retries. Before the fix the record stayed committing under this live process: a retry
    was refused "being committed by pid <self>", and after the lease the session was
    aborted. The seal is now read back and undone; and if even that fails, this process's
    next commit settles its own seal first."""
    repo, sid = make_repo(str(tmp_path / "repo"))
    records = repo._context.records
    real = records.swap
    faults = {"seal": 1}

    def swap(new, version):
        if new.status == "committing" and faults["seal"]:
            faults["seal"] -= 1
            real(new, version)
            raise TransientError("injected: the seal landed, its reply was lost")
        return real(new, version)

    records.swap = swap
    s = repo.join_session(sid)
    with pytest.raises(TransientError) as lost:
        s.commit("first")
    assert "nothing was committed and the session is open" in "".join(lost.value.__notes__)
    assert records.get(sid)[0].status == Status.OPEN
    cid = s.commit("retry")
    assert repo.resolve("main") == cid

    repo2, sid2 = make_repo(str(tmp_path / "repo2"))
    records2 = repo2._context.records
    real = records2.swap
    faults.update(seal=1)
    records2.swap = swap
    s = repo2.join_session(sid2)
    records2.update = lambda *a, **kw: (_ for _ in ()).throw(TransientError("down"))
    with pytest.raises(TransientError):
        s.commit("first")  # the undo failed too: the record stays committing
    del records2.update
    assert records2.get(sid2)[0].status == Status.COMMITTING
    cid = s.commit("retry")  # its own seal is settled first, never refused
    assert repo2.resolve("main") == cid


def test_a_worker_whose_clock_runs_ahead_never_expires_a_live_session(tmp_path):
    """Finding 7: one worker whose clock ran 2 h ahead joined a 1 h session and stored it
    as expired for everyone. Expiry is judged on the metastore's clock now."""
    location = str(tmp_path / "repo")
    repo, _ = make_repo(location)
    s = repo.create_session(expires_in=timedelta(hours=1))
    zarr.open_array(s.store, path="t")[0, 1] = 1
    s.flush()
    worker = zl.Repo.open(location)

    def ahead() -> None:
        w = worker.join_session(s.id)
        zarr.open_array(w.store, path="t")[1, 0] = 2
        w.flush()

    thread, outcome = _in_thread(ahead, skew=7200.0)
    thread.join(60)
    assert outcome == [None]
    assert repo.session_info(s.id).status == "open"
    s.commit("job")
    assert _table(repo) == [[0, 1], [2, 0]]


def test_a_metastore_copy_with_a_live_writer_loses_no_acknowledged_commit(
    tmp_path, pg_metastore_url
):
    """Finding 8: a writer that opened the repository before `metastore copy` kept
    committing through the old metastore after the copy returned: its acknowledged commits
    were not in the new one. The old metastore is fenced now: commits there are refused
    from the fence on, and what landed before is copied."""
    location = str(tmp_path / "repo")
    repo, _ = make_repo(location)
    writer = zl.Repo.open(location)
    stop = threading.Event()
    acked: list[str] = []
    refused: list[str] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                s = writer.create_session()
                zarr.open_array(s.store, path="t")[i % 2, 1] = i
                acked.append(s.commit(f"w{i}"))
            except zl.ZarrLakeError as e:
                refused.append(type(e).__name__)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while len(acked) < 5:
            time.sleep(0.01)  # (a few commits before the copy: pacing, not synchronisation)
        repo.copy_metastore(pg_metastore_url)
        while len(refused) < 3:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(60)
    moved = zl.Repo.open(location, metastore=pg_metastore_url)
    history = {c.id for c in moved.log("main")}
    assert [c for c in acked if c not in history] == []
    assert "RepositoryMovedError" in refused


def test_a_zombie_counts_as_gone(tmp_path):
    """A process that exited but was not reaped (where PID 1 reaps no orphans it stays a
    zombie) holds nothing: its identity is judged dead, as a killed collector's must be."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from zarrlake._util import runtime; print(runtime.identity())"],
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ident = proc.stdout.readline().strip()
        proc.stdout.close()
        for _ in range(500):  # until it has exited (not reaped: we do not wait for it)
            with open(f"/proc/{proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert runtime.identity_alive(ident) is False
    finally:
        proc.wait()


def test_gc_marks_past_a_commit_expired_under_it(tmp_path):
    """In the zero-grace stress with expire, gc raised ExpiredHistoryError on a commit
    expired while it marked. A walk now stops there, as at any expired commit, and the
    sweep's second look at the refs marks what today's heads need."""
    from zarrlake.vc.reach import Reach, expired_commits

    repo, sid = make_repo(str(tmp_path / "repo"))
    repo.join_session(sid).abandon()  # an open session would keep the history expire drops
    for v in (1, 2):
        s = repo.create_session()
        zarr.open_array(s.store, path="t")[1, 1] = v
        s.commit(f"v{v}")
    older = repo.log("main")[1].id
    reach = Reach(repo._context.objects, expired_commits(repo._context.objects))
    repo.expire(timedelta(0))  # under the walk
    assert repo.expired_at(older) is not None
    reach.add_commits([older])  # before the fix: ExpiredHistoryError
    assert older in reach.expired
    report = repo.gc(timedelta(0))
    assert report.objects_deleted > 0 and repo.fsck() == []
