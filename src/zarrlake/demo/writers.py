"""Concurrent writers for the demo: independent clients (each its own `Repo` handle and
session, in its own thread) that bias-correct a region of an array at the same time."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from zarrlake.demo.result import WriterOutcome
from zarrlake.errors import ConflictError
from zarrlake.repo import Repo
from zarrlake.session import Session

Region = tuple[slice, ...]


@dataclass(frozen=True)
class WriterJob:
    """Add `delta` to `array[region]` in one session, as client `name`."""

    name: str
    array: str
    region: Region
    delta: float

    def describe(self) -> str:
        """The writer's region in slice notation, e.g. `t2m[0:24, :]`."""

        def part(s: slice) -> str:
            return ":" if s.start is None and s.stop is None else f"{s.start or 0}:{s.stop}"

        leaf = self.array.rsplit("/", 1)[-1]
        return f"{leaf}[{', '.join(part(s) for s in self.region)}]"


def apply(session: Session, job: WriterJob) -> None:
    """Stage the job's change in `session`."""
    import zarr

    arr = zarr.open_array(session.store, path=job.array)
    arr[job.region] = np.asarray(arr[job.region]) + np.float32(job.delta)


def _write(
    location: str,
    job: WriterJob,
    staged: threading.Barrier,
    go: threading.Event | None,
    done: threading.Event | None,
    results: dict[str, WriterOutcome | BaseException],
) -> None:
    try:
        repo = Repo.open(location)
        try:
            session = repo.create_session(message=f"{job.name}: correct", author=job.name)
            apply(session, job)
            staged.wait(timeout=120)
            if go is not None:
                go.wait(timeout=120)
            try:
                commit = session.commit(f"{job.name}: bias-correct {job.describe()}")
                results[job.name] = WriterOutcome(job.name, job.describe(), "landed", commit)
            except ConflictError as e:
                session.abandon()  # its staged writes are kept until abandoned; retry afresh
                conflicts = [str(c) for c in e.conflicts]
                results[job.name] = WriterOutcome(
                    job.name, job.describe(), "conflict", conflicts=conflicts
                )
        finally:
            repo.close()
    except BaseException as e:  # re-raised by the calling thread
        results[job.name] = e
        staged.abort()
    finally:
        if done is not None:
            done.set()


def run_pair(location: str, first: WriterJob, second: WriterJob, *, ordered: bool) -> list:
    """Run two writers in threads. Both stage their writes before either commits; with
    `ordered`, the second commits only after the first has finished. Returns their
    outcomes in order; a writer's unexpected error is raised here."""
    staged = threading.Barrier(2)
    first_done = threading.Event() if ordered else None
    results: dict[str, WriterOutcome | BaseException] = {}
    threads = [
        threading.Thread(
            target=_write,
            args=(location, first, staged, None, first_done, results),
            name=first.name,
        ),
        threading.Thread(
            target=_write,
            args=(location, second, staged, first_done, None, results),
            name=second.name,
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = []
    for job in (first, second):
        got = results[job.name]
        if isinstance(got, BaseException) and not isinstance(got, threading.BrokenBarrierError):
            raise RuntimeError(f"writer {job.name} failed: {got}") from got
        outcomes.append(got)
    for got in outcomes:
        if isinstance(got, BaseException):
            raise RuntimeError("a writer failed before staging its change") from got
    return outcomes
