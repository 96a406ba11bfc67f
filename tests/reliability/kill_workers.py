"""The processes of the kill soak (test_kill_soak.py), each a loop until a stop file appears:

- `txn`: read-modify-write increments of one or two counter chunks on `main`, retried on
  conflict with a fresh session;
- `merge`: blind writes to the `side` array on `dev`, then merges of `dev` into `main` (and
  now and then `main` into `dev`; `dev` is reset to `main` when their common history
  expired);
- `gc`: garbage collection with no or a one-second grace period, now and then `full`;
- `expire`: expiry of history older than a few seconds on every branch.
- `coop`: cooperative sessions on `coop`: it begins a session, starts worker processes that
  join it by id, write their region of the `coop` array (flushing halfway) and simply end,
  SIGKILLs one of them in two rounds of three (just after its flush, or at any moment),
  and commits; refused for the dead worker, it chooses `unfinished="discard"` or `"include"`
  at random. It tags every commit `coop-<session>` so
  expiry keeps it for the checker.

Each appends to its journal before and after every operation (`op <kind>` then `done`), and
for every session it commits: `C <sid> <tag>` before, `A <sid> <cid>` when acknowledged,
`F <sid>` when it certainly failed (a conflict); a cooperative session adds
`K <sid> <killed workers>`, `R <sid> <each worker's returncode>` (its stderr is kept
beside the journal: `coop_stderr`) and, when refused, `U <sid> <choice>`. The supervisor reads the
journals to know what a process was doing when it killed it, and the checker to know what
was acknowledged. Lines are written with one os.write each, so a SIGKILL never leaves half
a line... but may leave none: an acknowledged commit whose `A` line was not written yet
counts as unknown.

Run as a module: python -m tests.reliability.kill_workers KIND LOCATION METASTORE JOURNAL SEED STOP
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import zarrlake as zl
from tests.reliability.workers import COUNTER_KEY, _bytes, _int
from zarrlake.errors import ExpiredHistoryError, GcBusyError, ZarrLakeError

SIDE_KEY = "side/c/{}"
SIDES = 4
COOP_KEY = "coop/c/{}"
COOP_WORKERS = 3
COOP_ROWS = 4  # chunks each cooperative worker writes; it flushes after the first half


def coop_value(sid: str, worker: int, row: int) -> bytes:
    """What worker `worker` of session `sid` writes into its `row`: unique to all three."""
    digest = hashlib.blake2b(f"{sid}:{worker}:{row}".encode(), digest_size=7).digest()
    return _bytes(int.from_bytes(digest, "little"))


class Journal:
    def __init__(self, path: str) -> None:
        self.dir = Path(path).parent
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
            s.write(key, value if value else _bytes(_int(s.read(key)) + 1))
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
        s = repo.create_session("coop", message="coop")
        j.line("C", s.id, "coop")
        workers = []
        for i in range(COOP_WORKERS):
            with open(coop_stderr(j.dir, s.id, i), "wb") as err:  # the checker shows it
                workers.append(
                    subprocess.Popen(
                        [
                            *(sys.executable, "-m", "tests.reliability.kill_workers"),
                            *("coop-worker", repo.spec.location, repo.spec.metastore or ""),
                            *(s.id, str(i)),
                        ],
                        stdout=subprocess.PIPE,
                        stderr=err,
                    )
                )
        victim = rng.choice(workers)
        rounds += 1
        if rounds % 3 == 1:  # once it has flushed half its region: the rest is lost with it
            assert victim.stdout is not None
            victim.stdout.readline()
            victim.kill()
        elif rounds % 3 == 2:  # at any moment
            time.sleep(rng.uniform(0.0, 1.5))  # when the kill lands, not synchronisation
            victim.kill()
        for w in workers:
            w.communicate()
        killed = [str(i) for i, w in enumerate(workers) if w.returncode == -9]
        j.line("K", s.id, ",".join(killed) or "-")
        j.line("R", s.id, ",".join(str(w.returncode) for w in workers))
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


def coop_stderr(journals: Path, sid: str, worker: int) -> Path:
    """Where the driver keeps what cooperative worker `worker` of session `sid` printed."""
    return journals / f"coop-{sid}-{worker}.stderr"


def coop_worker(location: str, metastore: str, sid: str, worker: str) -> None:
    """The seeds' pattern: join by id, write a region, end (no flush, no commit)."""
    repo = zl.Repo.open(location, metastore=metastore or None)
    s = repo.join_session(sid)
    n = int(worker)
    for row in range(COOP_ROWS):
        s.write(COOP_KEY.format(n * COOP_ROWS + row), coop_value(sid, n, row))
        if row == COOP_ROWS // 2 - 1:
            s.flush()
            print("flushed", flush=True)


KINDS = {"txn": txn, "merge": merge, "gc": gc, "expire": expire, "coop": coop}


def main(kind: str, location: str, metastore: str, journal: str, seed: str, stop: str) -> None:
    repo = zl.Repo.open(location, metastore=metastore or None)
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
