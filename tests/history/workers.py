"""Processes for the merge race: committers writing their own keys to main, and one merger
merging a branch into main at the same time. Each writes what it did to a JSON file."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path
from typing import Any

import zarrlake as zl


def committer(location: str, index: int, n: int, barrier: Any, out: str) -> None:
    repo = zl.Repo.open(location)
    barrier.wait()
    acks = []
    for t in range(n):
        s = repo.create_session(message=f"w{index} t{t}")
        s.write(f"w{index}/{t}", f"{index}:{t}".encode())
        acks.append(s.commit())
    Path(out).write_text(json.dumps({"acks": acks}))


def merger(location: str, source: str, barrier: Any, out: str) -> None:
    repo = zl.Repo.open(location)
    barrier.wait()
    cid = repo.merge(source, fast_forward="never", message="the merge")
    Path(out).write_text(json.dumps({"merge": cid}))


def run(location: str, n_committers: int, n: int, source: str, out_dir: Path) -> list[dict]:
    """Start the committers and the merger together (spawned), join them, read results."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_committers + 1)
    procs = []
    outs = []
    for i in range(n_committers):
        outs.append(str(out_dir / f"c{i}.json"))
        procs.append(ctx.Process(target=committer, args=(location, i, n, barrier, outs[-1])))
    outs.append(str(out_dir / "merge.json"))
    procs.append(ctx.Process(target=merger, args=(location, source, barrier, outs[-1])))
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(300)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * len(procs)
    return [json.loads(Path(o).read_text()) for o in outs]
