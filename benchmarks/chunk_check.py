"""CHUNKCHECK: what `Settings.check_chunks` (on by default) costs W1 and W2.

W1's and W2's ingest (the same arrays, data and zarr calls as workloads.py's), each run
with the check on and off in fresh worker processes of zarrlake, alternating (on, off, on,
off ...) in the same run; one record per repetition holds both and the cost in percent of
the time without the check (positive: the check made the ingest slower), and the share
of the ingest's CPU time spent inside the check (the process's CPU, the check's calls
timed by thread CPU: a figure a loaded machine disturbs much less than wall time).
Target: <= 2 % on each, the condition for the check being on by default.

    python -m benchmarks.run --only CHUNKCHECK [--quick] [--reps N]
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.arrays import MIB, generate, new_array
from benchmarks.groups import Group, Results
from benchmarks.procs import WorkerFailed, run_worker

NOTE = (
    "CHUNKCHECK: W1 and W2 ingest with Settings.check_chunks on and off, fresh processes "
    "alternating in the same run; cost = (on - off) / off of the seconds, per repetition."
)


def ingest(engine: Any, path: str, p: dict) -> dict:
    """W1's or W2's ingest (`p["which"]`) into a repository created with the check on or
    off (`p["check"]`); seconds of write + commit, as workloads.py times them, and the CPU
    seconds of the process and (check on) of the calls of the check itself."""
    from zarrlake.txn.writes import Writes

    inside = [0.0]
    check = Writes._check_chunk

    def timed(self: Writes, *args: Any) -> None:
        t = time.thread_time()
        try:
            check(self, *args)
        finally:
            inside[0] += time.thread_time() - t

    Writes._check_chunk = timed  # type: ignore[method-assign]
    shape = tuple(p["w1_shape"]) if p["which"] == "W1" else (p["w2_rows"], 256)
    data = generate(shape)
    engine.path = path
    engine.repo = engine.zl.Repo.create(path, settings={"check_chunks": p["check"]})
    t0, c0 = time.perf_counter(), time.process_time()
    store = engine.begin()
    new_array(store, shape, (1, *shape[1:]))[...] = data
    engine.commit("ingest")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": seconds,
        "mb_s": data.nbytes / MIB / seconds,
        "cpu_s": cpu,
        "check_cpu_s": inside[0],
    }


def run(cfg: dict[str, Any], work: Path) -> Results:
    """Each repetition: W1 on, W1 off, W2 on, W2 off (the order swapped every other one)."""
    records = []
    for rep in range(cfg["reps"]):
        record: dict[str, Any] = {}
        for which in ("W1", "W2"):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for check in order:
                path = work / f"{which}-{'on' if check else 'off'}-{rep}"
                shutil.rmtree(path, ignore_errors=True)
                params = {**cfg, "which": which, "check": check}
                try:
                    out = run_worker("benchmarks.chunk_check:ingest", "zarrlake", str(path), params)
                except (WorkerFailed, subprocess.TimeoutExpired) as e:
                    print(f"CHUNKCHECK rep {rep + 1} {which} check={check}: FAILED {e}")
                    out = {"error": str(e).strip().splitlines()[-1][:300]}
                shutil.rmtree(path, ignore_errors=True)
                key = f"{which.lower()}_{'on' if check else 'off'}"
                record.update({f"{key}_{k}": v for k, v in out.items()})
                print(f"CHUNKCHECK rep {rep + 1} {key}: {out}", flush=True)
            w = which.lower()
            on, off = record.get(f"{w}_on_seconds"), record.get(f"{w}_off_seconds")
            if on is not None and off is not None:
                record[f"{w}_cost_pct"] = 100 * (on - off) / off
            if record.get(f"{w}_on_cpu_s"):
                share = record[f"{w}_on_check_cpu_s"] / record[f"{w}_on_cpu_s"]
                record[f"{w}_check_share_pct"] = 100 * share
        records.append(record)
    return {"CHUNKCHECK": {"zarrlake": records}}


def groups(cfg: dict[str, Any]) -> list[Group]:
    return [Group("CHUNKCHECK", ["zarrlake"], run=run)]
