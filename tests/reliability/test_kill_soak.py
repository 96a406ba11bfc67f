"""Suite 5: real processes, killed for real. Counter transactions, merges, gc and expiry run
in worker processes (kill_workers.py) on one repository, on SQLite and on PostgreSQL, while
this supervisor SIGKILLs them in the middle of commits, merges, gc runs and expiries (and
restarts some with ZARRLAKE_CRASH_AT, so they kill themselves at a named step), restarting
each. Afterwards, with the dead committers' leases recovered:

- 0 lost: every acknowledged commit is recorded as its session's commit, and is in `main`'s
  history or was expired (or is kept by an open session below an expired commit, and noted
  for the next expiry: `lifecycle/islands.py`);
- 0 phantom: no session that failed for certain committed, and every commit in the history
  is a session's recorded commit, once;
- the counters hold exactly the increments of the sessions that committed (no lost update,
  no increment counted twice), and each merge commit carries its source's `side` array;
- a cooperative session's commit holds every chunk its workers that ended normally wrote
  (and no worker fails: each ends normally or by the SIGKILL),
  and none a killed worker wrote unless the commit chose `unfinished="include"`;
- `fsck` is clean.

Small here; ZARRLAKE_SOAK=1 (make soak) runs 10,000 transactions and 120 kills per backend.
"""

from __future__ import annotations

import contextlib
import os
import random
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
    COOP_KEY,
    COOP_ROWS,
    COOP_WORKERS,
    SIDE_KEY,
    SIDES,
    coop_stderr,
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


def _start(w: Worker, location: str, metastore: str, stop: Path, seed: int) -> None:
    env = {**os.environ}
    env.pop("ZARRLAKE_FAULTS", None)
    env.pop("ZARRLAKE_CRASH_AT", None)
    if w.crash_at:
        env["ZARRLAKE_CRASH_AT"] = w.crash_at
    w.proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.reliability.kill_workers",
            w.kind,
            location,
            metastore,
            str(w.journal),
            str(seed),
            str(stop),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _category(kind: str, op: str | None) -> str | None:
    if op == "commit" and kind == "txn":
        return "commit"
    return op if op in ("merge", "gc", "expire") else None


def supervise(
    location: str, metastore: str, tmp: Path, figures: Counter, backend: str
) -> list[Path]:
    """Run the workers, killing and restarting them, until TXNS transactions were
    acknowledged and KILLS kills made (at least a quarter of them in each category)."""
    rng = random.Random(2024)
    stop = tmp / "stop"
    workers = [
        Worker(kind, i, tmp / f"{kind}-{i}.journal")
        for kind, n in WORKERS.items()
        for i in range(n)
    ]
    journals = [w.journal for w in workers]
    for w in workers:
        _start(w, location, metastore, stop, rng.randrange(1 << 30))
    kills: Counter[str] = Counter()
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            quota = all(kills[c] >= max(KILLS // 4, 1) for c in CATEGORIES)
            enough = quota and sum(kills.values()) >= KILLS
            acked = sum(_count(j, "A ") for j in journals)
            coops = sum(_count(j, "A ") for j in journals if j.name.startswith("coop"))
            if enough and acked >= TXNS and coops >= COOPS:
                break
            time.sleep(rng.uniform(0.005, 0.05))  # the kill's timing, not synchronisation
            need = [c for c in CATEGORIES if kills[c] < max(KILLS // 4, 1)] or list(CATEGORIES)
            for w in workers:
                assert w.proc is not None
                code = w.proc.poll()
                if code is not None:  # it killed itself at its crash point, or failed
                    err = w.proc.stderr.read().decode() if w.proc.stderr else ""
                    assert code == -signal.SIGKILL, f"{w.kind} exited {code}: {err[-2000:]}"
                    kills[_category(w.kind, w.last_op()) or f"{w.kind}: between steps"] += 1
                    figures[f"kill soak ({backend}): self-kills at named steps"] += 1
                    _restart(w, location, metastore, stop, rng, journals)
            candidates = [w for w in workers if _category(w.kind, w.last_op()) in need]
            rate = 0.5 if sum(kills.values()) < KILLS or need != list(CATEGORIES) else 0.003
            if candidates and rng.random() < rate:
                w = rng.choice(candidates)
                category = _category(w.kind, w.last_op())
                assert w.proc is not None
                w.proc.send_signal(signal.SIGKILL)
                w.proc.wait()
                kills[category or f"{w.kind}: between steps"] += 1
                _restart(w, location, metastore, stop, rng, journals)
        else:
            pytest.fail(f"soak did not reach {TXNS} transactions and {KILLS} kills: {kills}")
    finally:
        stop.touch()
        for w in workers:
            if w.proc is not None:
                try:
                    w.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait()
    for c in CATEGORIES:
        figures[f"kill soak ({backend}): kills in {c} steps"] += kills[c]
    figures[f"kill soak ({backend}): kills"] += sum(kills.values())
    assert all(kills[c] >= max(KILLS // 4, 1) for c in CATEGORIES), kills
    return journals


def _restart(w: Worker, location, metastore, stop, rng: random.Random, journals) -> None:
    points = CRASH_POINTS[w.kind]
    w.crash_at = rng.choice(points) if points and rng.random() < 0.3 else None
    w.index += 1
    w.journal = w.journal.with_name(f"{w.kind}-{w.index}-{rng.randrange(1 << 20)}.journal")
    journals.append(w.journal)
    _start(w, location, metastore, stop, rng.randrange(1 << 30))


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
    returncodes: dict[str, list[int | None]] = {}  # cooperative session -> its workers'
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
            elif kind == "R":
                sid, codes = rest.split(" ")
                returncodes[sid] = [int(c) if c != "None" else None for c in codes.split(",")]
            elif kind == "U":
                sid, choice = rest.split(" ")
                chose[sid] = choice
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
    coops = check_cooperative(repo, committed, killed, chose, returncodes, journals[0].parent)
    assert repo.fsck() == []
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


def check_cooperative(
    repo: zl.Repo,
    committed: dict[str, str],
    killed: dict[str, set[int]],
    chose: dict[str, str],
    returncodes: dict[str, list[int | None]],
    journals: Path,
) -> Counter:
    """Each committed cooperative session holds every chunk its normally ended workers
    wrote. Of a killed worker's, it holds none if the commit chose `discard`, and all or
    none if the commit was not refused (the kill landed before its first write or after its
    exit had finished it); `include` keeps what it flushed."""
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
        codes = returncodes.get(sid) or [None] * COOP_WORKERS  # (unknown: driver killed)
        for worker in range(COOP_WORKERS):
            rows = range(worker * COOP_ROWS, (worker + 1) * COOP_ROWS)
            held = [
                snap.read(COOP_KEY.format(row)) == coop_value(sid, worker, row - rows[0])
                for row in rows
            ]
            said = f"it exited {codes[worker]}, stderr: {_stderr(journals, sid, worker)}"
            assert codes[worker] in (0, -9, None), f"session {sid}: worker {worker} failed: {said}"
            if worker not in dead:  # it ended normally: its exit finished its writer
                assert all(held), (
                    f"session {sid} (chose {chose.get(sid)}) lost writes of worker {worker}: "
                    f"{held}; {said}"
                )
            elif chose.get(sid) == "discard":
                assert not any(held), f"session {sid} holds writes of killed worker {worker}"
            elif sid not in chose:  # not refused: it died before writing, or after finishing
                assert len(set(held)) == 1, f"session {sid} holds part of worker {worker}'s"
    return seen


def _stderr(journals: Path, sid: str, worker: int) -> str:
    """The end of what cooperative worker `worker` of session `sid` printed."""
    try:
        return coop_stderr(journals, sid, worker).read_text()[-3000:] or "(empty)"
    except FileNotFoundError:
        return "(not kept)"


@pytest.mark.slow(seconds=40)  # each backend: handed out early, not last
@pytest.mark.timeout(int(TIMEOUT) + 300)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_kill_soak(backend, tmp_path, request, figures):
    location = str(tmp_path / "repo")
    metastore = request.getfixturevalue("pg_metastore_url") if backend == "postgres" else ""
    repo = setup_repo(location, metastore or None)
    s = repo.create_session()
    import zarr

    root = zarr.open_group(s.store, mode="a")
    for name, n in (("side", SIDES), ("coop", COOP_WORKERS * COOP_ROWS)):
        root.create_array(
            name, shape=(n,), chunks=(1,), dtype="<i8", fill_value=0, compressors=None
        )
    s.commit("side and coop arrays")
    setup_head = repo.resolve("main")
    repo.create_branch("dev", "main")
    repo.create_branch("coop", "main")
    journals = supervise(location, metastore, tmp_path, figures, backend)
    fresh = zl.Repo.open(location, metastore=metastore or None)
    with contextlib.closing(fresh):
        check(fresh, journals, setup_head, figures, backend)
