"""Pull request mergers in processes of their own: module level, so multiprocessing can
import them, and a command line (`python -m tests.pulls.workers WHERE_JSON ID BY`) for the
crash tests, where ZARRLAKE_CRASH_AT stops the merger at a named point."""

from __future__ import annotations

import faulthandler
import json
import sys
from typing import Any

import zarrlake as zl


def merge(where: dict, pr_id: int, by: str, barrier: Any = None) -> tuple[str, str]:
    """Merge pull request `pr_id` as `by` (after all racers reach `barrier`): ("merged",
    commit id) or (the error's class name, its message)."""
    repo = zl.Repo.open(**where)
    pr = repo.pull_request(pr_id)
    if barrier is not None:
        barrier.wait(timeout=60)
    try:
        return "merged", pr.merge(by=by)
    except zl.ZarrLakeError as e:
        return type(e).__name__, str(e)
    finally:
        repo.close()


def race(args: tuple[dict, int, str, Any, Any]) -> None:
    """A racer: merge, and put the outcome on `results`."""
    where, pr_id, by, barrier, results = args
    results.put((by, *merge(where, pr_id, by, barrier)))


def create(args: tuple[dict, str, Any, Any]) -> None:
    """A racer opening a pull request of its own branch: put its id on `results`."""
    where, branch, barrier, results = args
    repo = zl.Repo.open(**where)
    barrier.wait(timeout=60)
    results.put(repo.create_pull_request(branch, "main", author=branch).id)
    repo.close()


def create_same(args: tuple[dict, str, Any, Any]) -> None:
    """A racer opening a pull request of `branch` into main, as every racer does: put its
    id, or the error's class name and message, on `results`."""
    where, branch, barrier, results = args
    faulthandler.dump_traceback_later(50)  # a racer stuck before the barrier says where
    repo = zl.Repo.open(**where)
    barrier.wait(timeout=60)
    faulthandler.cancel_dump_traceback_later()
    try:
        results.put(("created", repo.create_pull_request(branch, "main").id))
    except zl.ZarrLakeError as e:
        results.put((type(e).__name__, str(e)))
    finally:
        repo.close()


def merge_paused(args: tuple[dict, int, Any, Any, Any]) -> None:
    """A merger that stops once its pull request is "merging" (its checks ran on the
    source) until `go` is set, having set `ready`: meanwhile the test moves the target.
    Puts ("merged", commit) or (error class, message, [(check, commit, base)]) on
    `results`."""
    from zarrlake._util import crashpoints

    where, pr_id, ready, go, results = args
    real = crashpoints.reached

    def pause(point: str) -> None:
        if point == "pr_after_merging":
            ready.set()
            go.wait(timeout=60)
        real(point)

    crashpoints.reached = pause
    repo = zl.Repo.open(**where)
    try:
        results.put(("merged", repo.pull_request(pr_id).merge(by="paused")))
    except zl.ChecksFailedError as e:
        failed = [(r.name, r.commit, r.base, [list(c) for c in r.chunks]) for r in e.results]
        results.put((type(e).__name__, str(e), failed))
    except zl.ZarrLakeError as e:
        results.put((type(e).__name__, str(e), []))
    finally:
        repo.close()


if __name__ == "__main__":
    outcome = merge(json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    sys.stdout.write(json.dumps(outcome) + "\n")
