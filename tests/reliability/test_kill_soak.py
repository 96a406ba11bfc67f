"""Suite 5: real processes, killed for real. Counter transactions, merges, gc and expiry run
in worker processes (kill_workers.py) on one repository, on SQLite, on PostgreSQL and on
the bucket metastore (moto's S3), while this supervisor SIGKILLs them in the middle of
commits, merges, gc runs and expiries (and restarts some with ZARRLAKE_CRASH_AT, so they
kill themselves at a named step), restarting each, and stops some for a moment (SIGSTOP,
SIGCONT: a committer holding its turn, a collector in its sweep). The counters' 16 KiB
`blobs` chunks are objects of their own, deduplicated between sessions that computed the
same value, while gc runs with no grace period. Afterwards, with the dead committers'
leases recovered:

- 0 lost: every acknowledged commit is recorded as its session's commit, and is in `main`'s
  history or was expired (or is kept by an open session below an expired commit, and noted
  for the next expiry: `lifecycle/islands.py`);
- 0 phantom: no session that failed for certain committed, and every commit in the history
  is a session's recorded commit, once;
- the counters hold exactly the increments of the sessions that committed (no lost update,
  no increment counted twice), and each merge commit carries its source's `side` array;
- a cooperative session's commit holds every chunk its workers that ended normally wrote,
  and none a killed worker wrote unless the commit chose `unfinished="include"`; one whose
  workers raced the commit holds every row whose flush returned;
- every counter's blob chunk is the one its value determines (none deleted under it);
- `fsck` is clean.

`test_kill_soak_catches_a_planted_bug` runs the soak with a planted bug on SQLite and
requires these checks to fail: a branch moved without compare-and-swap (committers stopped
while they hold their turn let others go on without one), and a commit gathering before it
seals (workers racing the commit), each with its own symptom, round after round (a fresh
repository each) until caught, within PLANTED_ROUNDS rounds.

Every worker runs in a process group of its own, and is SIGKILLed with its group (the
cooperative workers a `coop` driver started), by its PID before it is reaped: no process
outlives the soak, whatever path ends it.

Small here; ZARRLAKE_SOAK=1 (make soak) runs 10,000 transactions and 120 kills per backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import zarrlake as zl
from tests.helpers.reliability import size
from tests.reliability.kill_workers import (
    BLOB,
    BLOB_KEY,
    COOP_KEY,
    COOP_ROWS,
    COOP_WORKERS,
    RACE_ROWS,
    SIDE_KEY,
    SIDES,
    blob,
    coop_value,
)
from tests.reliability.workers import COUNTER_KEY, COUNTERS, _int, setup_repo
from zarrlake._util.crashpoints import GC_POINTS, POINTS
from zarrlake.errors import ExpiredHistoryError
from zarrlake.lifecycle.islands import islands
from zarrlake.txn.commit import load

ROOT = Path(__file__).resolve().parents[2]
TXNS = size(80, 10_000)
KILLS = size(8, 120)
COOPS = size(3, 100)  # cooperative sessions acknowledged
SMALL = (80, 8, 3)
"""(transactions, kills, cooperative commits) of one round of a soak with a planted bug, in
`make soak` too: rounds are run until it is caught (PLANTED_ROUNDS)."""
WORKERS = {"txn": 4, "merge": 1, "gc": 1, "expire": 1, "coop": 1}
CATEGORIES = ("commit", "merge", "gc", "expire")
CRASH_POINTS = {
    "txn": [p for p in POINTS if p not in ("after_chunk_upload",)],
    "gc": [p for p in GC_POINTS if p.startswith("gc_")],
    "expire": ["expire_after_markers"],
    "merge": [],
    "coop": [],
}
TIMEOUT = size(240.0, 3600.0)
PAUSES = (0.2, 2.5)
"""How long the supervisor stops a worker (SIGSTOP) now and then, in seconds."""


@dataclass
class Worker:
    kind: str
    index: int
    journal: Path
    proc: subprocess.Popen | None = None
    crash_at: str | None = None

    def last_op(self) -> str | None:
        """What the worker is doing now: the kind of its last `op` line not yet `done`."""
        try:
            with open(self.journal, "rb") as f:
                f.seek(max(0, os.path.getsize(self.journal) - 400))
                lines = f.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return None
        for line in reversed(lines[1:] if len(lines) > 1 else lines):
            if line == "done":
                return None
            if line.startswith("op "):
                return line[3:]
        return None


@dataclass(frozen=True)
class Target:
    """Where the soak runs: the repository, its metastore, its storage options, and the bug
    planted in its workers (if any)."""

    location: str
    metastore: str
    options: dict
    planted: str | None = None

    @property
    def size(self) -> tuple[int, int, int]:
        """(transactions, kills, cooperative commits) to run to."""
        return SMALL if self.planted else (TXNS, KILLS, COOPS)


def _start(w: Worker, where: Target, stop: Path, seed: int) -> None:
    env = {**os.environ}
    env.pop("ZARRLAKE_FAULTS", None)
    env.pop("ZARRLAKE_CRASH_AT", None)
    env["KILL_SOAK_STORAGE"] = json.dumps(where.options)
    env.pop("ZARRLAKE_PLANTED", None)
    env.pop("KILL_SOAK_ALWAYS_RACE", None)
    if where.planted:
        env["ZARRLAKE_PLANTED"] = where.planted
    if where.planted in RACING_BUGS:  # its window is only in a racing round: race each one
        env["KILL_SOAK_ALWAYS_RACE"] = "1"
    if w.crash_at:
        env["ZARRLAKE_CRASH_AT"] = w.crash_at
    w.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.reliability.kill_workers",
            w.kind,
            where.location,
            where.metastore,
            str(w.journal),
            str(seed),
            str(stop),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its group: the cooperative workers it starts are in it
    )


def _exited(w: Worker) -> bool:
    """Whether the worker's process ended, without reaping it: while it is not reaped its
    PID (its process group's id) is not given to another process."""
    assert w.proc is not None
    if w.proc.returncode is not None:
        return True
    return os.waitid(os.P_PID, w.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _end(w: Worker, sig: int | None = signal.SIGKILL) -> int:
    """SIGKILL the worker's process group (the worker and the cooperative workers it
    started: none outlives it), by its PID while it is not reaped yet, then reap the worker;
    its exit code. `sig` None: it ended by itself, only what it left is killed."""
    assert w.proc is not None
    if w.proc.returncode is None:
        if sig is not None:
            w.proc.send_signal(sig)
        os.waitid(os.P_PID, w.proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        with contextlib.suppress(ProcessLookupError):
            os.killpg(w.proc.pid, signal.SIGKILL)
    return w.proc.wait()


def _category(kind: str, op: str | None) -> str | None:
    if op == "commit" and kind == "txn":
        return "commit"
    return op if op in ("merge", "gc", "expire") else None


def supervise(where: Target, tmp: Path, figures: Counter, backend: str) -> list[Path]:
    """Run the workers, killing and restarting them, and stopping one now and then for a
    moment, until TXNS transactions were acknowledged and KILLS kills made (at least a
    quarter of them in each category)."""
    rng = random.Random(2024)
    txns, kills_wanted, coops_wanted = where.size
    stop = tmp / "stop"
    workers = [
        Worker(kind, i, tmp / f"{kind}-{i}.journal")
        for kind, n in WORKERS.items()
        for i in range(n)
    ]
    journals = [w.journal for w in workers]
    for w in workers:
        _start(w, where, stop, rng.randrange(1 << 30))
    kills: Counter[str] = Counter()
    stopped: list[tuple[float, Worker]] = []  # (when to continue it, worker)
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            quota = all(kills[c] >= max(kills_wanted // 4, 1) for c in CATEGORIES)
            enough = quota and sum(kills.values()) >= kills_wanted
            acked = sum(_count(j, "A ") for j in journals)
            coops = sum(_count(j, "A ") for j in journals if j.name.startswith("coop"))
            if enough and acked >= txns and coops >= coops_wanted:
                break
            time.sleep(rng.uniform(0.005, 0.05))  # the kill's timing, not synchronisation
            need = [c for c in CATEGORIES if kills[c] < max(kills_wanted // 4, 1)]
            need = need or list(CATEGORIES)
            for w in workers:
                assert w.proc is not None
                if _exited(w):  # it killed itself at its crash point, or failed
                    code = _end(w, None)
                    err = w.proc.stderr.read().decode() if w.proc.stderr else ""
                    assert code == -signal.SIGKILL, f"{w.kind} exited {code}: {err[-2000:]}"
                    kills[_category(w.kind, w.last_op()) or f"{w.kind}: between steps"] += 1
                    figures[f"kill soak ({backend}): self-kills at named steps"] += 1
                    _restart(w, where, stop, rng, journals)
            for until, w in list(stopped):  # continue the stopped ones whose time came
                if time.monotonic() >= until:
                    stopped.remove((until, w))
                    _signal(w, signal.SIGCONT)
            busy = [w for w in workers if w.last_op() and all(w is not x for _, x in stopped)]
            if busy and rng.random() < 0.05:  # a stall: most often in a commit or a sweep
                w = rng.choice(busy)
                _signal(w, signal.SIGSTOP)
                stopped.append((time.monotonic() + rng.uniform(*PAUSES), w))
                figures[f"kill soak ({backend}): stops (SIGSTOP)"] += 1
            candidates = [w for w in workers if _category(w.kind, w.last_op()) in need]
            short = sum(kills.values()) < kills_wanted or need != list(CATEGORIES)
            rate = 0.5 if short else 0.003
            if candidates and rng.random() < rate:
                w = rng.choice(candidates)
                category = _category(w.kind, w.last_op())
                assert w.proc is not None
                _end(w)
                stopped = [(u, x) for u, x in stopped if x is not w]
                kills[category or f"{w.kind}: between steps"] += 1
                _restart(w, where, stop, rng, journals)
        else:
            pytest.fail(f"soak did not reach {txns} transactions and {kills_wanted} kills: {kills}")
    finally:
        stop.touch()
        for _, w in stopped:
            _signal(w, signal.SIGCONT)
        _stop_all(workers)
    for c in CATEGORIES:
        figures[f"kill soak ({backend}): kills in {c} steps"] += kills[c]
    figures[f"kill soak ({backend}): kills"] += sum(kills.values())
    assert all(kills[c] >= max(kills_wanted // 4, 1) for c in CATEGORIES), kills
    return journals


def _stop_all(workers: list[Worker], grace: float = 60.0) -> None:
    """After the stop file: each worker ends its operation and exits, or is SIGKILLed after
    `grace` seconds; either way its process group goes with it (no process is left)."""
    deadline = time.monotonic() + grace
    for w in workers:
        if w.proc is None:
            continue
        while not _exited(w) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for its exit (waitid has no timeout)
        _end(w, None if _exited(w) else signal.SIGKILL)


def _signal(w: Worker, sig: int) -> None:
    if w.proc is not None and not _exited(w):  # not reaped here: its group is ended by _end
        with contextlib.suppress(ProcessLookupError):
            w.proc.send_signal(sig)


def _restart(w: Worker, where: Target, stop, rng: random.Random, journals) -> None:
    points = CRASH_POINTS[w.kind]
    w.crash_at = rng.choice(points) if points and rng.random() < 0.3 else None
    w.index += 1
    w.journal = w.journal.with_name(f"{w.kind}-{w.index}-{rng.randrange(1 << 20)}.journal")
    journals.append(w.journal)
    _start(w, where, stop, rng.randrange(1 << 30))


def _count(path: Path, prefix: str) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.startswith(prefix))
    except FileNotFoundError:
        return 0


def reachable(objects, head: str, stop: str) -> list[tuple[str, object]]:
    """Commits reachable from `head` through every parent (merges fast-forward `main` onto
    `dev`'s line), down to `stop` and to where history was expired."""
    out, seen, todo = [], {stop}, [head]
    while todo:
        cid = todo.pop()
        if cid in seen:
            continue
        seen.add(cid)
        try:
            rec = objects.read_commit(cid)
        except ExpiredHistoryError:
            continue
        out.append((cid, rec))
        todo.extend(rec.parents)
    return out


def check(
    repo: zl.Repo, journals: list[Path], setup_head: str, figures: Counter, backend: str
) -> None:
    ctx = repo._context
    begun: dict[str, str] = {}  # session -> tag
    acked: dict[str, str] = {}
    failed: set[str] = set()
    killed: dict[str, set[int]] = {}  # cooperative session -> its workers SIGKILLed
    chose: dict[str, str] = {}  # cooperative session -> its choice for them, if refused
    raced: dict[str, list[tuple[str, bytes]]] = {}  # session -> flushes that returned
    errored: dict[str, dict[int, tuple[str, str]]] = {}  # session -> worker -> (code, log)
    hung: list[str] = []  # "<session> <worker>" of cooperative workers that never ended
    for path in journals:
        for line in path.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "C":
                sid, tag = rest.split(" ", 1)
                begun[sid] = tag
            elif kind == "A":
                sid, cid = rest.split(" ")
                acked[sid] = cid
            elif kind == "F":
                failed.add(rest)
            elif kind == "K":
                sid, workers = rest.split(" ")
                killed[sid] = {int(w) for w in workers.split(",") if w != "-"}
            elif kind == "U":
                sid, choice = rest.split(" ")
                chose[sid] = choice
            elif kind == "X":
                sid, worker, code, log = rest.split(" ", 3)
                errored.setdefault(sid, {})[int(worker)] = (code, log)
            elif kind == "H":
                hung.append(rest)
            elif kind == "W":
                sid, key, value = rest.split(" ")
                raced.setdefault(sid, []).append((key, bytes.fromhex(value)))
    # the sessions of killed committers: their leases end now; every record is read as
    # recovery makes it (an aborted one whose commit turned up is committed)
    status = {}
    for sid in begun:
        rec, _ = ctx.records.get(sid)
        if rec.status == "committing":
            ctx.records.update(sid, lambda r: replace(r, lease=time.time() - 1))
        if rec.status in ("committing", "aborted"):
            rec, _ = load(ctx, sid)
        status[sid] = rec
    lost = [
        s for s, cid in acked.items() if status[s].status != "committed" or status[s].commit != cid
    ]
    phantom = [s for s in failed if status[s].status == "committed"]
    committed = {s: r.commit for s, r in status.items() if r.status == "committed"}
    history = reachable(ctx.objects, repo.resolve("main"), setup_head)
    seen: set[str] = set()
    for cid, rec in history:
        if rec.session_id is not None:
            if committed.get(rec.session_id) != cid or rec.session_id in seen:
                phantom.append(cid)
            seen.add(rec.session_id)
    # a commit an open session still keeps below an expired one is noted for the next expiry
    pending = set(islands(ctx))
    missing = [
        cid
        for s, cid in acked.items()
        if begun[s].startswith("inc")
        and cid not in {c for c, _ in history}
        and repo.expired_at(cid) is None
        and cid not in pending
    ]
    assert not lost, f"acknowledged commits not recorded as committed: {lost[:5]}"
    assert not missing, f"acknowledged commits neither in main's history nor expired: {missing[:5]}"
    assert not phantom, f"commits of failed or unknown sessions, or twice: {phantom[:5]}"
    increments = Counter(
        int(c) for s in committed if begun[s].startswith("inc:") for c in begun[s][4:].split(",")
    )
    main = repo.readonly_session("main")
    counters = [_int(main.read(COUNTER_KEY.format(c))) for c in range(COUNTERS)]
    assert counters == [increments[c] for c in range(COUNTERS)], (counters, increments)
    merges = 0
    for cid, rec in history:
        if len(rec.parents) == 2 and rec.message == "Merge dev into main":
            merges += 1  # main never writes `side` itself: a merge brings dev's
            if repo.expired_at(rec.parents[1]) is not None:
                continue
            mine, theirs = repo.readonly_session(cid), repo.readonly_session(rec.parents[1])
            for i in range(SIDES):
                key = SIDE_KEY.format(i)
                assert mine.read(key) == theirs.read(key), f"merge {cid} lost {key}"
    coops = check_cooperative(repo, committed, killed, chose, errored)
    coops["raced"] = check_raced(repo, committed, raced)
    for c in range(COUNTERS):  # each counter's blob is the one its value determines
        got = main.read(BLOB_KEY.format(c))
        assert got == (blob(c, counters[c]) if counters[c] else None), f"blob of counter {c}"
    assert repo.fsck() == []
    figures[f"kill soak ({backend}): racing flushes checked in their commit"] += coops["raced"]
    figures[f"kill soak ({backend}): cooperative commits checked"] += coops["checked"]
    figures[f"kill soak ({backend}): killed cooperative workers"] += coops["killed"]
    figures[f"kill soak ({backend}): cooperative commits refused first"] += coops["refused"]
    figures[f"kill soak ({backend}): transactions run"] += len(begun)
    figures[f"kill soak ({backend}): commits acknowledged"] += len(acked)
    figures[f"kill soak ({backend}): commits of killed committers recovered"] += sum(
        1 for s in committed if s not in acked
    )
    figures[f"kill soak ({backend}): merge commits checked"] += merges
    figures["lost commits"] += len(lost) + len(missing)
    figures["phantom commits"] += len(phantom)
    # a worker that never exits is a liveness bug of ours (one was: a writer's finish
    # re-entered at interpreter exit while its thread held the flush lock), not noise
    assert not hung, f"cooperative workers hung at exit (session worker): {hung}"


def check_raced(
    repo: zl.Repo, committed: dict[str, str], raced: dict[str, list[tuple[str, bytes]]]
) -> int:
    """A committed session whose workers raced its commit holds every row whose flush
    returned: an acknowledged write is in the commit (the writes after the seal raise)."""
    checked = 0
    for sid, flushes in raced.items():
        if sid not in committed:
            continue
        try:
            snap = repo.readonly_session(committed[sid])
        except ExpiredHistoryError:
            continue
        for key, value in flushes:
            assert snap.read(key) == value, f"session {sid}: an acknowledged flush of {key} lost"
            checked += 1
    return checked


def check_cooperative(
    repo: zl.Repo,
    committed: dict[str, str],
    killed: dict[str, set[int]],
    chose: dict[str, str],
    errored: dict[str, dict[int, tuple[str, str]]],
) -> Counter:
    """Each committed cooperative session holds every chunk its normally ended workers
    wrote. Of a killed worker's, it holds none if the commit chose `discard`, and all or
    none if the commit was not refused (the kill landed before its first write or after its
    exit had finished it); `include` keeps what it flushed. A worker of a committed session
    that exited with an error (neither ended normally nor killed) fails the soak with its
    stderr, never passes for one that ended normally."""
    for sid, workers in errored.items():
        for worker, (code, log) in workers.items():
            assert sid not in committed, (
                f"session {sid}: worker {worker} exited {code} (not killed); its stderr "
                f"({log}):\n{_tail(Path(log))}"
            )
    seen: Counter[str] = Counter()
    for sid, dead in killed.items():
        if sid not in committed:
            continue
        try:
            snap = repo.readonly_session(committed[sid])
        except ExpiredHistoryError:  # its tag was not made before its driver was killed
            continue
        seen["checked"] += 1
        seen["killed"] += len(dead)
        seen["refused"] += sid in chose
        for worker in range(COOP_WORKERS):
            rows = range(worker * COOP_ROWS, (worker + 1) * COOP_ROWS)
            held = [
                snap.read(COOP_KEY.format(row)) == coop_value(sid, worker, row - rows[0])
                for row in rows
            ]
            if worker not in dead:  # it ended normally: its exit finished its writer
                assert all(held), (
                    f"session {sid} (chose {chose.get(sid)}) lost writes of worker {worker}: {held}"
                )
            elif chose.get(sid) == "discard":
                assert not any(held), f"session {sid} holds writes of killed worker {worker}"
            elif sid not in chose:  # not refused: it died before writing, or after finishing
                assert len(set(held)) == 1, f"session {sid} holds part of worker {worker}'s"
    return seen


def _tail(path: Path, size: int = 4000) -> str:
    """The end of a worker's stderr file (what it printed before it exited)."""
    try:
        return path.read_text(errors="replace")[-size:]
    except FileNotFoundError:
        return "(no stderr file)"


def _target(backend: str, tmp_path: Path, request, planted: str | None = None) -> Target:
    """The soak's repository on `backend`, created, with its arrays and branches."""
    if backend == "bucket":
        location, options = request.getfixturevalue("s3_location")
        metastore = "bucket"
    else:
        location, options = str(tmp_path / "repo"), {}
        metastore = request.getfixturevalue("pg_metastore_url") if backend == "postgres" else ""
    repo = setup_repo(location, metastore or None, options or None)
    s = repo.create_session()
    import zarr

    root = zarr.open_group(s.store, mode="a")
    coop_rows = COOP_WORKERS * max(COOP_ROWS, RACE_ROWS)
    for name, n, chunk in (
        ("side", SIDES, 1),
        ("coop", coop_rows, 1),
        ("blobs", COUNTERS * BLOB, BLOB),
    ):
        root.create_array(
            name, shape=(n,), chunks=(chunk,), dtype="<i8", fill_value=0, compressors=None
        )
    s.commit("side, coop and blobs arrays")
    repo.create_branch("dev", at="main")
    repo.create_branch("coop", at="main")
    repo.close()
    return Target(location, metastore, options, planted)


def _soak(where: Target, tmp_path: Path, figures: Counter, backend: str) -> None:
    def fresh() -> zl.Repo:
        return zl.Repo.open(
            where.location, metastore=where.metastore or None, storage_options=where.options
        )

    with contextlib.closing(fresh()) as repo:
        setup_head = repo.resolve("main")
    journals = supervise(where, tmp_path, figures, backend)
    with contextlib.closing(fresh()) as repo:
        check(repo, journals, setup_head, figures, backend)


@pytest.mark.slow(seconds=40)  # each backend: handed out early, not last
@pytest.mark.timeout(int(TIMEOUT) + 300)
@pytest.mark.parametrize(
    "backend",
    # the bucket's run needs about 150 s alone on 2 cores: make soak runs it
    ["sqlite", "postgres", pytest.param("bucket", marks=pytest.mark.soak)],
)
def test_kill_soak(backend, tmp_path, request, figures):
    _soak(_target(backend, tmp_path, request), tmp_path, figures, backend)


SYMPTOMS = {
    "branch_moves_blindly": r"acknowledged commits|commits of failed|^\(\[|merge \w+ lost",
    "gather_before_seal": r"an acknowledged flush of \S+ lost",
}
"""What the checks say when they catch each planted bug (a lost update shows as counters
short of their increments: the assertion's `(counters, increments)`)."""
RACING_BUGS = {"gather_before_seal"}
"""Planted bugs only a cooperative round racing its commit can show: with one planted,
every cooperative round races (not every other one)."""
PLANTED_ROUNDS = 20
PLANTED_BUDGET = 600.0
"""A planted bug's soak runs round after round (each a fresh repository) until its checks
fail: at most PLANTED_ROUNDS rounds, none begun after PLANTED_BUDGET seconds. Whether one
round of SMALL meets the bug is chance."""


@pytest.mark.soak  # rounds until caught, each a matter of chance: make soak runs it
@pytest.mark.slow(seconds=40)
@pytest.mark.timeout(int(PLANTED_BUDGET + TIMEOUT) + 300)
@pytest.mark.parametrize("bug", ["branch_moves_blindly", "gather_before_seal"])
def test_kill_soak_catches_a_planted_bug(bug, tmp_path, request, figures):
    """The review's P2 and P4, planted in every worker on SQLite, where committers take
    turns on a file lock: the soak's checks fail within a bounded number of rounds."""
    start = time.monotonic()
    caught: AssertionError | None = None
    rounds = 0
    while caught is None and rounds < PLANTED_ROUNDS:
        if time.monotonic() - start > PLANTED_BUDGET:
            break
        rounds += 1
        here = tmp_path / f"round-{rounds}"
        here.mkdir()
        try:
            _soak(_target("sqlite", here, request, bug), here, figures, "sqlite")
        except AssertionError as error:
            if not re.search(SYMPTOMS[bug], str(error).splitlines()[0]):
                raise  # a failure of another kind: not this bug's catch
            caught = error
    took = time.monotonic() - start
    assert caught is not None, f"planted {bug} not caught in {rounds} rounds ({took:.0f} s)"
    figures[f"kill soak: planted {bug} caught"] += 1
    figures[f"kill soak: planted {bug}: rounds to catch"] += rounds
    first = str(caught).splitlines()[0][:200]
    print(f"\n  planted {bug}: caught in round {rounds} ({took:.0f} s): {first}")
