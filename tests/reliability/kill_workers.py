"""The processes of the kill soak (test_kill_soak.py), each a loop until a stop file appears:

- `txn`: read-modify-write increments of one or two counter chunks on `main`, retried on
  conflict with a fresh session; each increment also writes the counter's `blobs` chunk
  (16 KiB, its own object) from the new value, so sessions that computed the same value
  store the same bytes: a deduplicated upload, often of an object a conflicting session
  left as garbage, which gc with no grace period is deleting;
- `merge`: blind writes to the `side` array on `dev`, then merges of `dev` into `main` (and
  now and then `main` into `dev`; `dev` is reset to `main` when their common history
  expired);
- `gc`: garbage collection with no or a one-second grace period, now and then `full`;
- `expire`: expiry of history older than a few seconds on every branch.
- `coop`: cooperative sessions on `coop`: it begins a session, starts worker processes that
  join it by id, write their region of the `coop` array (flushing halfway) and simply end,
  SIGKILLs one of them in two rounds of three (just after its flush, or at any moment),
  and commits; refused for the dead worker, it chooses `unfinished="discard"` or `"include"`
  at random. Every other round its workers race the commit instead: each writes and
  flushes one row at a time until a flush is refused, reporting every flush that returned
  (`W <sid> <row> <value>`), and the driver commits at a random moment. It tags every
  commit `coop-<session>` so expiry keeps it for the checker.

Each appends to its journal before and after every operation (`op <kind>` then `done`), and
for every session it commits: `C <sid> <tag>` before, `A <sid> <cid>` when acknowledged,
`F <sid>` when it certainly failed (a conflict); a cooperative session adds
`K <sid> <killed workers>`, `X <sid> <worker> <exit code> <stderr file>` for each worker
that exited with an error (its stderr kept in that file beside the journal), `H <sid>
<worker>` for each it SIGKILLed as hung (HANG) and, when
refused, `U <sid> <choice>`. The supervisor reads the
journals to know what a process was doing when it killed it, and the checker to know what
was acknowledged. Lines are written with one os.write each, so a SIGKILL never leaves half
a line... but may leave none: an acknowledged commit whose `A` line was not written yet
counts as unknown.

Run as a module: python -m tests.reliability.kill_workers KIND LOCATION METASTORE JOURNAL SEED STOP
(env KILL_SOAK_STORAGE: the repository's storage options as JSON; ZARRLAKE_PLANTED: a
planted bug of `tests.simulator.planted` to run with, for the soak's own test;
KILL_SOAK_ALWAYS_RACE: every cooperative round races its commit, not every other one)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import zarrlake as zl
from tests.reliability.workers import COUNTER_KEY, _bytes, _int
from zarrlake.errors import ExpiredHistoryError, GcBusyError, SessionClosedError, ZarrLakeError

SIDE_KEY = "side/c/{}"
SIDES = 4
COOP_KEY = "coop/c/{}"
COOP_WORKERS = 3
COOP_ROWS = 4  # chunks each cooperative worker writes; it flushes after the first half
RACE_ROWS = 40  # rows each racing worker writes, one flush each, until refused
BLOB_KEY = "blobs/c/{}"
BLOB = 2048  # int64 elements of a `blobs` chunk: 16 KiB, over the 8 KiB staged inline


def blob(counter: int, value: int) -> bytes:
    """The `blobs` chunk of `counter` at `value`: 16 KiB that only they determine."""
    return hashlib.blake2b(f"{counter}:{value}".encode()).digest() * (BLOB * 8 // 64)


def open_repo(location: str, metastore: str) -> zl.Repo:
    """The repository, with the storage options the soak passes in its environment."""
    options = json.loads(os.environ.get("KILL_SOAK_STORAGE") or "{}") or None
    return zl.Repo.open(location, metastore=metastore or None, storage_options=options)


def coop_value(sid: str, worker: int, row: int) -> bytes:
    """What worker `worker` of session `sid` writes into its `row`: unique to all three."""
    digest = hashlib.blake2b(f"{sid}:{worker}:{row}".encode(), digest_size=7).digest()
    return _bytes(int.from_bytes(digest, "little"))


class Journal:
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, *parts: object) -> None:
        os.write(self.fd, (" ".join(str(p) for p in parts) + "\n").encode())

    def op(self, kind: str) -> None:
        self.line("op", kind)

    def done(self) -> None:
        self.line("done")


def commit_session(
    repo: zl.Repo, j: Journal, branch: str, writes: dict[str, bytes], tag: str
) -> bool:
    """One session writing `writes` (b"": one more than it reads); True if acknowledged,
    False after a conflict (the caller retries)."""
    s = repo.create_session(branch, message=tag)
    j.line("C", s.id, tag)
    j.op("commit")
    try:
        for key, value in writes.items():
            if value:
                s.write(key, value)
                continue
            new = _int(s.read(key)) + 1
            s.write(key, _bytes(new))
            if key.startswith("counters/"):  # its blob: deduplicated against equal values
                counter = int(key.rsplit("/", 1)[1])
                s.write(BLOB_KEY.format(counter), blob(counter, new))
        cid = s.commit()
    except zl.ConflictError:
        j.line("F", s.id)
        j.done()
        with contextlib.suppress(ZarrLakeError):
            s.abandon()
        return False
    j.line("A", s.id, cid)
    j.done()
    return True


def txn(repo: zl.Repo, j: Journal, rng: random.Random, stop: Path) -> None:
    while not stop.exists():
        chunks = sorted(rng.sample(range(8), rng.choice((1, 1, 2))))
        tag = "inc:" + ",".join(map(str, chunks))
        writes = {COUNTER_KEY.format(c): b"" for c in chunks}  # b"": increment what is read
        while not stop.exists() and not commit_session(repo, j, "main", writes, tag):
            pass


def merge(repo: zl.Repo, j: Journal, rng: random.Random, stop: Path) -> None:
    n = rng.randrange(1 << 30)
    while not stop.exists():
        n += 1
        side = {SIDE_KEY.format(n % SIDES): _bytes(n)}
        commit_session(repo, j, "dev", side, "side")
        into, source = ("main", "dev") if rng.random() < 0.8 else ("dev", "main")
        j.op("merge")
        try:
            head = repo.merge(source, into=into, fast_forward=rng.choice(("allow", "never")))
            j.line("M", into, head)
        except ExpiredHistoryError:
            j.done()
            j.op("reset")
            repo.reset_branch("dev", "main")
        except zl.ConflictError:
            pass
        j.done()


def gc(repo: zl.Repo, j: Journal, rng: random.Random, stop: Path) -> None:
    while not stop.exists():
        j.op("gc")
        with contextlib.suppress(GcBusyError):
            repo.gc(timedelta(seconds=rng.choice((0, 1))), full=rng.random() < 0.2)
        j.done()
        time.sleep(0.05)  # pacing: collect between commits, not in a tight loop


def expire(repo: zl.Repo, j: Journal, rng: random.Random, stop: Path) -> None:
    while not stop.exists():
        j.op("expire")
        repo.expire(timedelta(seconds=rng.choice((2, 5))))
        j.done()
        time.sleep(0.2)  # pacing


def coop(repo: zl.Repo, j: Journal, rng: random.Random, stop: Path) -> None:
    rounds = 0
    while not stop.exists():
        rounds += 1
        s = repo.create_session("coop", message="coop")
        j.line("C", s.id, "coop")
        racing = rounds % 2 == 0 or bool(os.environ.get("KILL_SOAK_ALWAYS_RACE"))
        logs = [j.path.with_name(f"coop-{s.id}-{i}.stderr") for i in range(COOP_WORKERS)]
        workers: list[subprocess.Popen] = []
        try:
            _coop_round(repo, j, rng, s, workers, logs, racing, rounds)
        finally:  # an error in the round: none of its workers outlives it
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()


def _coop_round(
    repo: zl.Repo,
    j: Journal,
    rng: random.Random,
    s: zl.Session,
    workers: list[subprocess.Popen],
    logs: list[Path],
    racing: bool,
    rounds: int,
) -> None:
    """One cooperative session: start its workers (into `workers`), kill one or race them,
    commit."""
    for i, log in enumerate(logs):
        with log.open("wb") as err:  # the child keeps its own descriptor
            workers.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "tests.reliability.kill_workers"),
                        *("coop-worker", repo.spec.location, repo.spec.metastore or ""),
                        *(s.id, str(i), *(["race"] if racing else [])),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=err,
                )
            )
    if racing:
        _race(repo, j, rng, s, workers)
        _failed_workers(j, s.id, workers, logs)
        return
    victim = rng.choice(workers)
    if rounds % 3 == 1:  # once it has flushed half its region: the rest is lost with it
        assert victim.stdout is not None
        victim.stdout.readline()
        victim.kill()
    elif rounds % 3 == 2:  # at any moment
        time.sleep(rng.uniform(0.0, 1.5))  # when the kill lands, not synchronisation
        victim.kill()
    for w in workers:
        _communicate(w)
    killed = [str(i) for i, w in enumerate(workers) if w.returncode == -9]
    j.line("K", s.id, ",".join(killed) or "-")
    _failed_workers(j, s.id, workers, logs)
    j.op("commit")
    try:
        cid = s.commit()
    except zl.UnfinishedWritersError:
        choice = rng.choice(("discard", "include"))
        j.line("U", s.id, choice)
        cid = s.commit(unfinished=choice)
    j.line("A", s.id, cid)
    j.done()
    repo.create_tag(f"coop-{s.id}", cid)


HANG = 60.0
"""Seconds a cooperative worker may take to end once its driver waits for it: a worker
still running then is hung (it writes 4 or 40 small rows), SIGKILLed and journalled
(`H <sid> <worker>`), and the check fails the soak: a process that does not exit is a bug
(seen once: a racing worker deadlocked at interpreter exit, its writer's finish re-entered
from a finalizer while it held the flush lock; fixed in `txn/writers.py`)."""
_HUNG: set[subprocess.Popen] = set()


def _communicate(w: subprocess.Popen) -> bytes:
    """The worker's stdout once it ended; a worker hung for HANG seconds is SIGKILLed and
    noted in _HUNG (journalled as `H <sid> <worker>`)."""
    try:
        out, _ = w.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        _HUNG.add(w)
        w.kill()
        out, _ = w.communicate()
    return out or b""


def _failed_workers(j: Journal, sid: str, workers: list, logs: list[Path]) -> None:
    """Journal `X <sid> <worker> <exit code> <stderr file>` for each worker that exited with
    an error (neither ended normally nor SIGKILLed), so the checker never takes it for one
    that ended normally; the stderr files of the others are dropped."""
    for i, (w, log) in enumerate(zip(workers, logs, strict=True)):
        if w in _HUNG:
            j.line("H", sid, i)
        if w.returncode not in (0, -9):
            j.line("X", sid, i, w.returncode, log)
        else:
            log.unlink(missing_ok=True)


def _race(repo: zl.Repo, j: Journal, rng: random.Random, s: zl.Session, workers: list) -> None:
    """Commit while the workers flush row after row; journal every flush that returned."""
    lines: list[str] = []
    first = workers[0].stdout
    assert first is not None
    lines.append(first.readline().decode())  # a worker's first flush returned: they all run
    time.sleep(rng.uniform(0.0, 0.3))  # when the commit lands among the flushes
    j.op("commit")
    cid = None
    with contextlib.suppress(zl.ConflictError, SessionClosedError):
        cid = s.commit(unflushed="discard", unfinished="include", allow_empty=True)
    for w in workers:
        lines += _communicate(w).decode().splitlines()
    for line in lines:
        if line.startswith("ACK "):
            j.line("W", s.id, *line.split()[1:])
    if cid is None:
        j.line("F", s.id)
        j.done()
        return
    j.line("A", s.id, cid)
    j.done()
    repo.create_tag(f"coop-{s.id}", cid)


def coop_worker(location: str, metastore: str, sid: str, worker: str, race: str = "") -> None:
    """The seeds' pattern: join by id, write a region, end (no flush, no commit). Racing:
    write and flush one row at a time, saying which flushes returned, until refused."""
    repo = open_repo(location, metastore)
    n = int(worker)
    if race:
        try:
            s = repo.join_session(sid)
        except SessionClosedError:  # the commit came before this worker joined: refused
            return
        for row in range(RACE_ROWS):
            key = COOP_KEY.format(n * RACE_ROWS + row)
            value = coop_value(sid, n, row)
            try:
                s.write(key, value)
                s.flush()
            except ZarrLakeError:  # the commit sealed the session: this write is not in it
                return
            print("ACK", key, value.hex(), flush=True)
        return
    s = repo.join_session(sid)
    for row in range(COOP_ROWS):
        s.write(COOP_KEY.format(n * COOP_ROWS + row), coop_value(sid, n, row))
        if row == COOP_ROWS // 2 - 1:
            s.flush()
            print("flushed", flush=True)


KINDS = {"txn": txn, "merge": merge, "gc": gc, "expire": expire, "coop": coop}


def main(kind: str, location: str, metastore: str, journal: str, seed: str, stop: str) -> None:
    bug = os.environ.get("ZARRLAKE_PLANTED")
    if bug:
        from tests.simulator.planted import planted

        with planted(bug):
            return _main(kind, location, metastore, journal, seed, stop)
    return _main(kind, location, metastore, journal, seed, stop)


def _main(kind: str, location: str, metastore: str, journal: str, seed: str, stop: str) -> None:
    repo = open_repo(location, metastore)
    rng = random.Random(int(seed))
    j = Journal(journal)
    j.line("start", os.getpid())
    while True:  # an operation may fail for a reason worth retrying (a busy metastore)
        try:
            KINDS[kind](repo, j, rng, Path(stop))
            return
        except ZarrLakeError as e:
            j.line("E", type(e).__name__, str(e)[:200].replace("\n", " "))


if __name__ == "__main__":
    if sys.argv[1] == "coop-worker":
        coop_worker(*sys.argv[2:])
    else:
        main(*sys.argv[1:])
