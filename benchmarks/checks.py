"""CHECKS: the cost of checks on a change, against reading the changed chunks once.

- change: an array of `checks_chunks` float64 chunks of 64 KiB (8,192 values), all written
  by one commit; `repo.run_checks` (computed afresh) with MaxNaNFraction, ValueRange,
  RequiredAttrs, SchemaUnchanged, MaxChangedChunks and NoDeletedChunks on it, against
  reading those chunks once (`array[...]` of the region, through a read-only session) in
  the same process. Target: checks <= 1.5x the read.
- one: an array of `checks_big` chunks (4 float32 values each, stored raw) and a commit
  that changes one of them; the same checks (plus Monotonic) on that commit, in ms.
  Target: <= 50 ms.

    python -m benchmarks.run --only CHECKS [--quick]
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import zarr

from benchmarks.groups import Group, Step

SIZES = {
    "full": {"checks_chunks": 10_000, "checks_big": 1_000_000, "checks_reps": 3},
    "quick": {"checks_chunks": 1_000, "checks_big": 100_000, "checks_reps": 2},
}
NOTE = (
    "CHECKS: checks on a change of {checks_chunks:,} chunks of 64 KiB vs reading them once "
    "(same process, best of {checks_reps}); checks on one changed chunk of a "
    "{checks_big:,}-chunk array (ms)."
)
ROW = 8192  # float64 values per 64 KiB chunk
SLAB = 500


def _rules(repo: Any, array: str, coord: str | None = None) -> None:
    from zarrlake.checks import (
        MaxChangedChunks,
        MaxNaNFraction,
        Monotonic,
        NoDeletedChunks,
        RequiredAttrs,
        SchemaUnchanged,
        ValueRange,
    )

    repo.add_check("nan", MaxNaNFraction(array, 0.5), branches=("nowhere",))
    repo.add_check("range", ValueRange(array, -1e9, 1e9), branches=("nowhere",))
    repo.add_check("attrs", RequiredAttrs(array, ("units",)), branches=("nowhere",))
    repo.add_check("schema", SchemaUnchanged(array, (0,)), branches=("nowhere",))
    repo.add_check("count", MaxChangedChunks(10**9), branches=("nowhere",))
    repo.add_check("nodel", NoDeletedChunks(), branches=("nowhere",))
    if coord is not None:
        repo.add_check("mono", Monotonic(coord), branches=("nowhere",))


def change(engine: Any, path: str, p: dict) -> dict:
    """Checks on a commit writing `checks_chunks` chunks of 64 KiB vs reading them once."""
    import zarrlake as zl

    n, reps = p["checks_chunks"], p["checks_reps"]
    repo = zl.Repo.create(f"{path}/change")  # the group's steps share `path`
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="v", shape=(n, ROW), chunks=(1, ROW), dtype="f8",
        fill_value=np.nan, attributes={"units": "K"},
    )  # fmt: skip
    s.commit("empty array")
    s = repo.create_session()
    arr = zarr.open_array(s.store, path="v")
    rng = np.random.default_rng(7)
    for at in range(0, n, SLAB):
        rows = min(SLAB, n - at)
        arr[at : at + rows] = np.round(rng.normal(280, 5, (rows, ROW)), 1)
    cid = s.commit(f"{n} chunks")
    _rules(repo, "v")
    reads, checks, read_chunks = [], [], 0
    for _ in range(reps):  # alternating, each from the same warm state
        t0 = time.perf_counter()
        data = zarr.open_array(repo.readonly_session(cid).store, path="v", mode="r")[:]
        reads.append(time.perf_counter() - t0)
        assert data.shape == (n, ROW)
        del data
        t0 = time.perf_counter()
        res = repo.run_checks(cid, reuse=False)
        checks.append(time.perf_counter() - t0)
        assert all(r.passed for r in res), [str(r) for r in res if not r.passed]
        read_chunks = res[0].chunks_read
    return {
        "read_s": min(reads),
        "checks_s": min(checks),
        "ratio": min(checks) / min(reads),
        "read_median_s": statistics.median(reads),
        "checks_median_s": statistics.median(checks),
        "chunks_read": read_chunks,
        "chunks": n,
    }


def one(engine: Any, path: str, p: dict) -> dict:
    """Checks on a one-chunk commit to an array of `checks_big` chunks, in ms."""
    import zarrlake as zl

    n, reps = p["checks_big"], p["checks_reps"]
    path = f"{path}/one"  # the group's steps share the directory
    repo = zl.Repo.create(path)
    s = repo.create_session()
    zarr.create_array(
        s.store, name="big", shape=(n * 4,), chunks=(4,), dtype="f4", compressors=None,
        fill_value=0, attributes={"units": "K"},
    )  # fmt: skip
    t0 = time.perf_counter()
    values = np.arange(n * 4, dtype="<f4")
    for at in range(0, n, 50_000):
        stop = min(at + 50_000, n)
        s.write_many([(f"big/c/{k}", values[4 * k : 4 * k + 4].tobytes()) for k in range(at, stop)])
    s.commit(f"{n} chunks")
    build_s = time.perf_counter() - t0
    _rules(repo, "big", "big")
    times, read = [], 0
    for r in range(reps):
        s = repo.create_session()
        k = n // 2 + r
        zarr.open_array(s.store, path="big")[4 * k : 4 * k + 4] = (
            4 * k + np.array([0.25] * 4) + [0, 1, 2, 3]
        )
        cid = s.commit("one chunk")
        fresh = zl.Repo.open(path)  # cold caches, as a reviewer's process would be
        t0 = time.perf_counter()
        res = fresh.run_checks(cid, reuse=False)
        times.append(time.perf_counter() - t0)
        assert all(x.passed for x in res), [str(x) for x in res if not x.passed]
        read = res[0].chunks_read  # the chunk, and its neighbours for Monotonic
        fresh.close()
    return {"checks_ms": 1000 * min(times), "checks_median_ms": 1000 * statistics.median(times),
            "build_s": build_s, "chunks": n, "chunks_read": read}  # fmt: skip


def groups(cfg: dict[str, Any]) -> list[Group]:
    """CHECKS: zarrlake only (the reference is its own read of the same chunks)."""
    return [
        Group(
            "CHECKS",
            ["zarrlake"],
            [
                Step("benchmarks.checks:change", "CHECKS", "change."),
                Step("benchmarks.checks:one", "CHECKS", "one."),
            ],
        )
    ]
