"""The processes of the kill soak (test_kill_soak.py), each a loop until a stop file appears:

- `txn`: read-modify-write increments of one or two counter chunks on `main`, retried on
  conflict with a fresh session;
- `merge`: blind writes to the `side` array on `dev`, then merges of `dev` into `main` (and
  now and then `main` into `dev`; `dev` is reset to `main` when their common history
  expired);
- `gc`: garbage collection with no or a one-second grace period, now and then `full`;
- `expire`: expiry of history older than a few seconds on every branch.

Each appends to its journal before and after every operation (`op <kind>` then `done`), and
for every session it commits: `C <sid> <chunks>` before, `A <sid> <cid>` when acknowledged,
`F <sid>` when it certainly failed (a conflict). The supervisor reads the journals to know
what a process was doing when it killed it, and the checker to know what was acknowledged.
Lines are written with one os.write each, so a SIGKILL never leaves half a line... but may
leave none: an acknowledged commit whose `A` line was not written yet counts as unknown.

Run as a module: python -m tests.reliability.kill_workers KIND LOCATION METASTORE JOURNAL SEED STOP
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

import zarrlake as zl
from tests.reliability.workers import COUNTER_KEY, _bytes, _int
from zarrlake.errors import ExpiredHistoryError, GcBusyError, ZarrLakeError

SIDE_KEY = "side/c/{}"
SIDES = 4


class Journal:
    def __init__(self, path: str) -> None:
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


KINDS = {"txn": txn, "merge": merge, "gc": gc, "expire": expire}


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
    main(*sys.argv[1:])
