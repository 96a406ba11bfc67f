"""Recovery of a session whose committer stopped: it never returns to "open" on a guess.

Real committer processes are stopped at named points (ZARRLAKE_CRASH_AT kills them; the
child below can also hold at a point until the test releases it, standing for a pause), and
the test process plays the other workers of the session. Reproductions 1 and 2 of the
protocol review (a commit outliving its lease while it waits for a stalled gc sweep; a read
error during recovery taken for "not landed") are here, both failing before the fix.

Run as a module, this file is the committer:
python -m tests.reliability.test_recovery DIR SESSION_ID [METASTORE_URL]
(env HOLD_AT=<point> prints "HOLD <point>" there and waits for a line on stdin.)
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake._util import crashpoints, runtime
from zarrlake.errors import GcBusyError, SessionClosedError, TransientError
from zarrlake.session_records import Status
from zarrlake.txn.commit import LEASE_MARGIN, load
from zarrlake.vc.gc_protocol import LOCK, PHASE, SWEEP_LEASE, GcState, Phase

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def open_repo(location: str, meta: str | None) -> zl.Repo:
    return zl.Repo.open(location, metastore=meta) if meta else zl.Repo.open(location)


def committer(location: str, sid: str, meta: str | None) -> None:
    """The committer process: joins the session and commits it, its commit timeout lowered
    to 5 s (lease 65 s) as in the review's reproduction."""
    hold_at = os.environ.get("HOLD_AT")
    original = crashpoints.reached

    def reached(point: str) -> None:
        nonlocal hold_at
        if point == hold_at:
            hold_at = None  # once
            print(f"HOLD {point}", flush=True)
            sys.stdin.readline()
        original(point)

    crashpoints.reached = reached
    repo = open_repo(location, meta)
    repo._context.settings = replace(repo._context.settings, commit_timeout=5.0)
    s = repo.join_session(sid)
    try:
        print("COMMITTED", s.commit("committer"), flush=True)
    except zl.ZarrLakeError as e:
        print("RAISED", type(e).__name__, str(e).replace("\n", " "), flush=True)


def start_committer(
    location: str, sid: str, meta: str | None = None, hold: str | None = None, crash: str = ""
) -> subprocess.Popen:
    env = {**ENV, "HOLD_AT": hold or "", "ZARRLAKE_CRASH_AT": crash}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.test_recovery", location, sid, meta or ""],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def expect_line(proc: subprocess.Popen, prefix: str) -> str:
    """The committer's next line, which must start with `prefix` (blocks until written)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(prefix), (line, proc.poll())
    return line


def resume(proc: subprocess.Popen) -> None:
    """Let a committer held at its point go on."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def make_repo(location: str, meta: str | None = None) -> tuple[zl.Repo, str]:
    """A repository with a 2x2 array t, and a session that set t[0,0] = 11 (flushed)."""
    repo = zl.Repo.create(location, metastore=meta) if meta else zl.Repo.create(location)
    s = repo.create_session()
    zarr.open_group(s.store).create_array("t", shape=(2, 2), chunks=(1, 1), dtype="i8")
    s.commit("create t")
    s = repo.create_session(message="job")
    zarr.open_array(s.store, path="t")[0, 0] = 11
    s.flush()
    return repo, s.id


def sessions_in_log(repo: zl.Repo) -> Counter:
    return Counter(c.session_id for c in repo.log("main") if c.session_id)


def past_every_lease(repo: zl.Repo) -> None:
    """This process's clock, far past any lease (instead of waiting for it)."""
    repo._context.clock = lambda: time.time() + 10 * (repo._context.settings.commit_timeout + 60)


# Reproduction 1 -------------------------------------------------------------------------


def _kill_a_collector_mid_sweep(location: str, meta: str | None) -> None:
    """Run a gc that SIGKILLs itself once its sweep began (the phase stays sweeping)."""
    gc = subprocess.run(
        [sys.executable, "-c", "import sys, zarrlake as zl, datetime as d; "
         "zl.Repo.open(sys.argv[1], metastore=sys.argv[2] or None)"
         ".gc(older_than=d.timedelta(0))",
         location, meta or ""],
        env={**ENV, "ZARRLAKE_CRASH_AT": "gc_after_sweep_begins"},
        cwd=ROOT,
    )  # fmt: skip
    assert gc.returncode == -9


@pytest.mark.parametrize("host", ["same", "other"])
def test_a_commit_behind_a_killed_collector_lands_within_a_minute_with_its_data(
    tmp_path, pg_metastore_url, host
):
    """Review finding 1 of the first review, and "a dead gc releases commits fast": a gc
    SIGKILLed mid-sweep leaves the phase sweeping. On this host its process is known gone
    (pid, start time, boot id): the committer behind it ends the sweep at once. Seen from
    another host (here: its identity rewritten to another host's), its sweep lease, renewed
    by a heartbeat while it ran, ends SWEEP_LEASE after the last renewal (here set to end
    5 s ahead). Either way the commit lands well within 60 s, with its data, and once."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    _kill_a_collector_mid_sweep(location, pg_metastore_url)
    ctx = repo._context
    phase, version = GcState(ctx).phase()
    assert phase.sweeping and phase.holder is not None
    if host == "other":
        elsewhere = "|".join(("another-host", *phase.holder.split("|")[1:]))
        ctx.meta.set_if(
            ctx.partition("gc"),
            PHASE,
            replace(phase, holder=elsewhere, until=ctx.clock() + 5.0).encode(),
            version,
        )
    began = time.monotonic()
    proc = start_committer(location, sid, pg_metastore_url)
    try:
        out = expect_line(proc, "COMMITTED")
    finally:
        proc.kill()
        proc.wait()
    took = time.monotonic() - began
    assert took < 60.0, took
    if host == "other":
        assert took > 4.0, took  # it waited for the lease, not for a guess
    assert not GcState(ctx).phase()[0].sweeping
    assert repo.resolve("main") == out.split()[1]
    t = zarr.open_array(repo.readonly_session("main").store, path="t")[:]
    assert t.tolist() == [[11, 0], [0, 0]]
    assert sessions_in_log(repo)[sid] == 1
    assert repo.fsck() == []


# Reproduction 2 -------------------------------------------------------------------------


def test_a_read_error_during_recovery_leaves_the_record_and_raises(tmp_path, pg_metastore_url):
    """Review finding 2: the committer is killed right after its branch CAS and one history
    read fails during recovery. Before the fix that read error meant "not landed": the
    session reopened and a second commit of it landed. On PostgreSQL: on SQLite the fence,
    the branch swap and the record's finish are one transaction, with no state between them
    to stop in."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    proc = start_committer(location, sid, pg_metastore_url, crash="after_branch_cas")
    proc.communicate()
    assert proc.returncode == -9
    assert repo.commit_info("main").session_id == sid
    assert repo._context.records.get(sid)[0].status == Status.COMMITTING

    ctx = repo._context
    past_every_lease(repo)
    real = ctx.objects.read_commit
    calls = []

    def flaky(oid):
        calls.append(oid)
        if len(calls) == 1:
            raise TransientError("simulated: S3 503 SlowDown after retries")
        return real(oid)

    ctx.objects.read_commit = flaky
    with pytest.raises(TransientError):
        repo.join_session(sid)
    assert calls, "recovery read nothing"
    assert ctx.records.get(sid)[0].status == Status.COMMITTING  # left as it was
    with pytest.raises(SessionClosedError, match="committed"):
        s = repo.join_session(sid)  # the read works now: its commit is found
        s.commit("retry", on_conflict="ours")
    rec = ctx.records.get(sid)[0]
    assert rec.status == Status.COMMITTED and rec.commit == repo.resolve("main")
    assert sessions_in_log(repo)[sid] == 1


def test_recovery_finds_a_landed_commit_beside_a_merged_line_whose_history_expired(
    tmp_path, pg_metastore_url
):
    """Found by the kill soak: a committer killed after its branch swap; main then gains
    commits and a merge of a line whose older history was expired. Recovery searched every
    parent breadth first and gave up at the first expired commit (on the merged line),
    recording the session aborted though its commit was in main's history on another path;
    it now searches on and records it committed. On PostgreSQL: on SQLite the fence, the
    branch swap and the record's finish are one transaction, with no state between them to
    stop in."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    repo.create_branch("dev", "main")
    dev = []
    for v in (1, 2):
        d = repo.create_session("dev")
        zarr.open_array(d.store, path="t")[1, 0] = v
        dev.append(d.commit(f"dev {v}"))
    proc = start_committer(location, sid, pg_metastore_url, crash="after_branch_cas")
    proc.communicate()
    assert proc.returncode == -9
    landed = repo.resolve("main")
    for v in (1, 2):
        m = repo.create_session()
        zarr.open_array(m.store, path="t")[1, 1] = v
        repo.create_tag(f"m{v}", m.commit(f"main {v}"))
    repo.merge("dev", into="main")
    repo.expire(timedelta(0))
    assert repo.expired_at(dev[0]) is not None  # the committing session's commit is kept
    assert repo._context.records.get(sid)[0].status == Status.COMMITTING

    rec, _ = load(repo._context, sid)
    assert (rec.status, rec.commit) == (Status.COMMITTED, landed)


# Issue 29: a committer killed mid-commit -------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("point", ["after_seal", "before_branch_cas", "after_branch_cas"])
def test_a_dead_committer_reopens_its_session_at_once(tmp_path, point, store, request):
    """A committer known dead whose commit did not land no longer blocks its session for
    the lease (about 120 s): the next reader reopens it, and the cooperative job commits
    the same session with what its workers flushed. On SQLite the fence (the attempt
    recorded), the branch swap and the record's finish are one transaction: a kill between
    them leaves the state before it, the record sealed with no attempt and the branch not
    moved, which recovery decides as it decides a kill before the fence. On PostgreSQL
    each is its own: a kill after the swap leaves its commit on the branch, found."""
    meta = request.getfixturevalue("pg_metastore_url") if store == "postgres" else None
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, meta)
    if point == "after_branch_cas" and meta is not None:
        proc = start_committer(location, sid, meta, crash=point)
        proc.communicate()
        assert proc.returncode == -9
        assert repo.commit_info("main").session_id == sid
        rec, _ = load(repo._context, sid)
        assert rec.status == Status.COMMITTED and rec.commit == repo.resolve("main")
        return
    proc = start_committer(location, sid, meta, crash=point)
    proc.communicate()
    assert proc.returncode == -9
    rec = repo._context.records.get(sid)[0]
    assert rec.status == Status.COMMITTING and time.time() < rec.lease  # lease still on

    s = repo.join_session(sid)  # no wait
    assert s.state == Status.OPEN
    zarr.open_array(s.store, path="t")[1, 1] = 22
    cid = s.commit("resumed")
    t = zarr.open_array(repo.readonly_session("main").store, path="t")[:]
    assert t.tolist() == [[11, 0], [0, 22]] and repo.resolve("main") == cid
    assert sessions_in_log(repo)[sid] == 1
    assert bool(rec.attempts) is (point == "before_branch_cas" and meta is not None)


def test_a_live_committer_refuses_with_who_since_and_when(tmp_path):
    """While a live process commits, a worker is told who commits, since when, and when the
    session can be committed again."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location)
    proc = start_committer(location, sid, hold="before_branch_cas")
    try:
        expect_line(proc, "HOLD before_branch_cas")
        with pytest.raises(SessionClosedError) as err:
            repo.join_session(sid)
        text = str(err.value)
        assert "being committed since" in text and f"pid {proc.pid} on " in text
        assert "lease ends at" in text and "as soon as this is noticed" in text
        resume(proc)
        assert expect_line(proc, "COMMITTED").split()[1] == repo.resolve("main")
    finally:
        proc.kill()
        proc.wait()
    assert sessions_in_log(repo)[sid] == 1


def _foreign(identity: str) -> str:
    """`identity` as seen from another host: its liveness cannot be told from here."""
    return "|".join(("another-host", *identity.split("|")[1:]))


def test_a_paused_committer_on_this_host_is_waited_for_and_lands_with_its_data(
    tmp_path, pg_metastore_url
):
    """A committer paused (alive) between recording its attempt and its branch CAS, past its
    lease: on this host it is known alive, so nobody gives it up; a gc keeps its session's
    data; when it resumes its commit lands whole (review finding 2, pause). On PostgreSQL:
    on SQLite the fence, the branch swap and the record's finish are one transaction, with
    no state between them to stop in."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    proc = start_committer(location, sid, pg_metastore_url, hold="before_branch_cas")
    try:
        expect_line(proc, "HOLD before_branch_cas")
        past_every_lease(repo)
        with pytest.raises(SessionClosedError, match="being committed"):
            repo.join_session(sid)
        repo.gc(timedelta(0), full=True)
        assert repo._context.records.get(sid)[0].status == Status.COMMITTING
        resume(proc)
        assert expect_line(proc, "COMMITTED").split()[1] == repo.resolve("main")
    finally:
        proc.kill()
        proc.wait()
    t = zarr.open_array(repo.readonly_session("main").store, path="t")[:]
    assert t.tolist() == [[11, 0], [0, 0]]
    assert repo.fsck() == []


@pytest.mark.parametrize("then", ["resumes", "dies"])
def test_a_commit_never_lands_after_its_session_was_aborted(tmp_path, then, pg_metastore_url):
    """Review finding 2: a committer whose liveness cannot be told (another host), paused
    between recording its attempt and its branch CAS, past its lease, is aborted; recovery
    revokes its landing first. When it resumes, its branch CAS is refused, however late
    (before the fix it landed on a session gc had reclaimed); gc may then reclaim the
    session's data. Had its CAS landed before the revocation, the commit is found (`dies`:
    it lands, then dies before its record is finished). On PostgreSQL: on SQLite the fence,
    the branch swap and the record's finish are one transaction, with no state between them
    to stop in."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    crash = "after_branch_cas" if then == "dies" else ""
    proc = start_committer(location, sid, pg_metastore_url, hold="before_branch_cas", crash=crash)
    try:
        expect_line(proc, "HOLD before_branch_cas")
        ctx = repo._context
        ctx.records.update(sid, lambda r: replace(r, committer=_foreign(r.committer or "")))
        if then == "dies":  # its swap lands first, its record is left committing
            resume(proc)
            proc.communicate()
        past_every_lease(repo)
        if then == "dies":
            assert load(ctx, sid)[0].status == Status.COMMITTED
            assert sessions_in_log(repo)[sid] == 1
            return
        with pytest.raises(SessionClosedError, match="aborted"):
            repo.join_session(sid)
        rec = ctx.records.get(sid)[0]
        assert rec.status == Status.ABORTED and not rec.attempts
        assert "cannot be checked from here" in (rec.note or "")
        repo.gc(timedelta(0), full=True)  # the aborted session's data goes
        resume(proc)
        out = expect_line(proc, "RAISED")
    finally:
        proc.kill()
        proc.wait()
    assert "SessionClosedError" in out and "branch was not moved" in out, out
    assert sessions_in_log(repo)[sid] == 0
    t = zarr.open_array(repo.readonly_session("main").store, path="t")[:]
    assert t.tolist() == [[0, 0], [0, 0]]
    assert repo.fsck() == []


def test_a_reset_after_a_committer_died_past_its_branch_swap_commits_nothing_twice(
    tmp_path, pg_metastore_url
):
    """A committer killed after its branch swap, before finishing its record; the branch is
    then reset back past its commit. The reset records the session committed first (while
    the branch still held the commit): recovery must not take the missing commit for "not
    landed" and reopen the session (the known issue "reset-after-crash"). On PostgreSQL: on
    SQLite the fence, the branch swap and the record's finish are one transaction, with no
    state between them to stop in."""
    location = str(tmp_path / "repo")
    repo, sid = make_repo(location, pg_metastore_url)
    base = repo.resolve("main")
    proc = start_committer(location, sid, pg_metastore_url, crash="after_branch_cas")
    proc.communicate()
    assert proc.returncode == -9
    landed = repo.resolve("main")
    assert repo.commit_info(landed).session_id == sid
    repo.reset_branch("main", base)
    past_every_lease(repo)
    with contextlib.suppress(SessionClosedError):
        repo.join_session(sid).commit("again")
    rec = repo._context.records.get(sid)[0]
    assert rec.status == Status.COMMITTED and rec.commit == landed
    assert repo.resolve("main") == base and sessions_in_log(repo)[sid] == 0


# Leases and the fence, in one process --------------------------------------------------


def test_a_waiting_committer_renews_its_lease_and_stops_once_aborted(tmp_path):
    """The commit waiting for a sweep renews its lease by CAS (a reader then sees it
    committing, not overdue); once another reader aborts the record, the committer's next
    renewal fails and it stops before the branch swap."""
    repo, sid = make_repo(str(tmp_path / "repo"))
    ctx = repo._context
    now = [time.time()]
    ctx.clock = lambda: now[0]
    ctx.meta.set(ctx.partition("gc"), PHASE, Phase(1, True, now[0] + 100_000).encode())
    polls: queue.Queue[str] = queue.Queue()
    go = threading.Semaphore(0)
    over = threading.Event()

    def sleep(_: float) -> None:
        if over.is_set():
            raise RuntimeError("the test is over")
        polls.put("waiting")
        go.acquire()

    ctx.write_guard.sleep = sleep
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(repo.join_session(sid).commit("waits"))
        except Exception as e:
            outcome.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        _renews_then_stops(ctx, sid, now, polls, go, t, outcome)
    finally:
        over.set()
        go.release()
    assert sessions_in_log(repo)[sid] == 0
    assert ctx.records.get(sid)[0].status == Status.ABORTED


def _renews_then_stops(ctx, sid, now, polls, go, t, outcome) -> None:
    assert polls.get(timeout=60) == "waiting"
    rec = ctx.records.get(sid)[0]
    span = ctx.settings.commit_timeout + LEASE_MARGIN
    assert rec.status == Status.COMMITTING and rec.lease == pytest.approx(now[0] + span)
    first = rec.lease

    now[0] += span * 0.75  # past half the lease: the next poll renews it
    go.release()
    assert polls.get(timeout=60) == "waiting"
    rec = ctx.records.get(sid)[0]
    assert rec.lease == pytest.approx(now[0] + span) and rec.lease > first
    assert load(ctx, sid)[0].status == Status.COMMITTING  # renewed: not overdue

    now[0] += span * 2  # a pause longer than the lease
    assert load(ctx, sid)[0].status == Status.COMMITTING  # alive (this process): waited for
    # seen from another host (its liveness unknown), a lease that lapsed is given up on
    ctx.records.update(sid, lambda r: replace(r, committer=_foreign(r.committer or "")))
    assert load(ctx, sid)[0].status == Status.ABORTED
    go.release()
    t.join(timeout=60)
    assert not t.is_alive()
    (error,) = outcome
    assert isinstance(error, SessionClosedError) and "stopped before moving the branch" in str(
        error
    ), error


def test_a_late_commit_of_the_same_session_is_never_followed_by_a_second(tmp_path):
    """If a session's record went back to open although its commit landed (a request of a
    dead committer applied late), committing it again finds that commit and stops: the
    record becomes committed, and the error says the later writes are not in it."""
    repo, sid = make_repo(str(tmp_path / "repo"))
    first = repo.join_session(sid).commit("first")
    other = repo.create_session()
    zarr.open_array(other.store, path="t")[1, 0] = 5
    other.commit("someone else")
    repo._context.records.update(
        sid, lambda r: replace(r, status=Status.OPEN, commit=None, committer=None)
    )
    s = repo.join_session(sid)
    zarr.open_array(s.store, path="t")[0, 1] = 7
    with pytest.raises(SessionClosedError, match=f"already committed as {first[:12]}"):
        s.commit("second", on_conflict="ours")
    rec = repo._context.records.get(sid)[0]
    assert rec.status == Status.COMMITTED and rec.commit == first
    assert sessions_in_log(repo)[sid] == 1


# gc lock liveness -----------------------------------------------------------------------


def _identity_of_a_finished_process() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "from zarrlake._util import runtime; print(runtime.identity())"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("holder", "age", "taken"),
    [
        ("alive", 10.0, False),
        ("alive", SWEEP_LEASE + 10, False),
        ("dead", 10.0, True),
        ("other-namespace", 10.0, False),  # same host name, cannot be told: never a guess
        ("other-namespace", 3700.0, True),  # past LOCK_TTL without renewal
        ("legacy-dead-pid", 10.0, False),  # host:pid only, younger than a sweep's lease
        ("legacy-dead-pid", SWEEP_LEASE + 10, True),
    ],
)
def test_the_gc_lock_is_taken_over_only_from_a_known_dead_or_silent_holder(
    tmp_path, holder, age, taken
):
    repo, _ = make_repo(str(tmp_path / "repo"))
    state = GcState(repo._context)
    me = runtime.identity()
    dead = _identity_of_a_finished_process()
    host, boot, _, pid, start = me.split("|")
    doc = {
        "alive": {"owner": "x:1:0", "identity": me},
        "dead": {"owner": "x:1:0", "identity": dead},
        "other-namespace": {"owner": "x:1:0", "identity": "|".join((host, boot, "1", pid, start))},
        "legacy-dead-pid": {"owner": f"{host}:{dead.split('|')[3]}:0"},
    }[holder] | {"since": time.time() - age}
    repo._context.meta.set(state.partition, LOCK, json.dumps(doc).encode())
    if taken:
        state.acquire()
        assert json.loads(repo._context.meta.get(state.partition, LOCK)[0])["identity"] == me
        state.release()
    else:
        with pytest.raises(GcBusyError, match="another garbage collection is running"):
            state.acquire()


def test_a_collector_whose_lock_was_taken_stops_before_its_next_delete_batch(tmp_path):
    """The collector re-checks by CAS that it holds the lock before each delete batch."""
    from zarrlake.lifecycle.gc import collect

    repo, _ = make_repo(str(tmp_path / "repo"))
    s = repo.create_session()
    zarr.open_group(s.store).create_array("big", shape=(4096,), chunks=(2048,), dtype="i8")
    s.commit("create big")
    for i in range(3):  # garbage: three abandoned sessions' chunk objects (16 KiB each)
        s = repo.create_session()
        zarr.open_array(s.store, path="big")[:] = np.random.default_rng(i).integers(0, 2**62, 4096)
        s.flush()
        s.abandon()
    batches = []
    state = GcState(repo._context)

    def deleter(batch):  # a FencedDeletes (vc/sweep_fence.py)
        keys = list(batch.tags)
        batches.append(keys)
        for key in keys:
            repo._context.object_store.delete(key)
        got = repo._context.meta.get(state.partition, LOCK)
        doc = json.loads(got[0]) | {"owner": "someone:else:0"}
        repo._context.meta.set(state.partition, LOCK, json.dumps(doc).encode())
        return keys

    with pytest.raises(GcBusyError, match="taken over"):
        collect(repo._context, timedelta(0), full=True, deleter=deleter, delete_batch=1)
    assert len(batches) == 1
    assert not GcState(repo._context).phase()[0].sweeping


if __name__ == "__main__":
    committer(sys.argv[1], sys.argv[2], sys.argv[3] or None)
