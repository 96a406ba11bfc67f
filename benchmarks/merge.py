"""Merge cost: two branches with N changed chunks each (disjoint), merged into main, against
a commit of the same size. Prints one JSON line per run and the medians.

A commit returns before its session's staged records are dropped (a background thread does
that); each step here waits for that cleanup, untimed, so that no timed step (the next
commit, the merge) shares the 2 cores with the previous commit's cleanup.

    .venv/bin/python benchmarks/merge.py [--chunks 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import tempfile
import time

import zarr

import zarrlake as zl


def settle(session: zl.Session) -> None:
    """Wait for the committed session's background cleanup (no public API for it)."""
    cleanup = getattr(getattr(session, "_txn", None), "cleanup", None)
    if cleanup is not None:
        cleanup.result()


def one_run(n: int, root: str) -> dict:
    repo = zl.Repo.create(f"{root}/repo")
    s = repo.create_session()
    zarr.open_group(s.store, mode="a").create_array(
        "a", shape=(2 * n,), chunks=(1,), dtype="<i8", fill_value=0, compressors=None
    )
    s.commit("create")
    repo.create_branch("dev")

    def stage(branch: str, start: int):
        s = repo.create_session(branch)
        s.write_many([(f"a/c/{i}", struct.pack("<q", i + 1)) for i in range(start, start + n)])
        return s

    s = stage("dev", 0)
    t = time.perf_counter()
    s.commit(f"dev: {n} chunks")
    dev_commit = time.perf_counter() - t
    settle(s)
    s = stage("main", n)
    t = time.perf_counter()
    s.commit(f"main: {n} chunks")
    main_commit = time.perf_counter() - t
    settle(s)
    t = time.perf_counter()
    repo.merge("dev")
    merge = time.perf_counter() - t
    snap = repo.readonly_session("main")
    assert snap.read("a/c/0") == struct.pack("<q", 1)
    assert snap.read(f"a/c/{2 * n - 1}") == struct.pack("<q", 2 * n)
    repo.close()
    return {
        "chunks_per_side": n,
        "commit_ms": round(1000 * min(dev_commit, main_commit), 1),
        "merge_ms": round(1000 * merge, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as root:
            runs.append(one_run(args.chunks, root))
            print(json.dumps(runs[-1]))
    print(
        json.dumps(
            {
                "median_commit_ms": statistics.median(r["commit_ms"] for r in runs),
                "median_merge_ms": statistics.median(r["merge_ms"] for r in runs),
            }
        )
    )


if __name__ == "__main__":
    main()
