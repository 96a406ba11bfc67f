"""The multi-process transaction workload and its history checker (suites 2 and 4).

Each worker process runs isolated transactions against one branch: read-modify-write
increments of one or two counter chunks (retried on ConflictError with a fresh session),
and blind writes of a unique tag into one shared chunk with on_conflict="ours". Every
attempt's outcome is written to a JSON file; the checker then replays the branch history
serially and compares it with the stored state at every commit.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import random
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import zarr

import zarrlake as zl
from zarrlake.testing.faults import enable_from_env

COUNTERS = 8
COUNTER_KEY = "counters/c/{}"
LAST_KEY = "last/c/0"
MAX_ATTEMPTS = 50


def _int(data: bytes | None) -> int:
    return 0 if data is None else struct.unpack("<q", data)[0]


def _bytes(value: int) -> bytes:
    return struct.pack("<q", value)


def setup_repo(
    location: str, metastore: str | None = None, storage_options: dict | None = None
) -> zl.Repo:
    """A repository with int64 arrays `counters` (one element per chunk) and `last`."""
    repo = zl.Repo.create(location, metastore=metastore, storage_options=storage_options)
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    for name, n in (("counters", COUNTERS), ("last", 1)):
        root.create_array(
            name, shape=(n,), chunks=(1,), dtype="<i8", fill_value=0, compressors=None
        )
    s.commit("setup")
    return repo


def worker(
    location: str,
    metastore: str | None,
    index: int,
    n_txns: int,
    seed: int,
    faults: str | None,
    barrier: Any,
    out: str,
    storage_options: dict | None = None,
) -> None:
    """Run `n_txns` transactions (each retried until it commits) and record every attempt."""
    if faults:
        os.environ["ZARRLAKE_FAULTS"] = faults
        enable_from_env()
    repo = zl.Repo.open(location, metastore=metastore, storage_options=storage_options)
    rng = random.Random(seed)
    acks: list[dict] = []
    fails: list[dict] = []
    barrier.wait()
    for t in range(n_txns):
        blind = rng.random() < 0.25
        chunks = sorted(rng.sample(range(COUNTERS), rng.choice((1, 1, 2))))
        tag = (index + 1) * 1_000_000 + t
        for _ in range(MAX_ATTEMPTS):
            s = repo.create_session(message=f"w{index} t{t}")
            try:
                if blind:
                    s.write(LAST_KEY, _bytes(tag))
                    cid = s.commit(on_conflict="ours")
                else:
                    for c in chunks:
                        key = COUNTER_KEY.format(c)
                        s.write(key, _bytes(_int(s.read(key)) + 1))
                    cid = s.commit()
            except Exception as e:  # every failure is recorded, then judged by the checker
                fails.append({"sid": s.id, "error": type(e).__name__, "detail": str(e)[:300]})
                with contextlib.suppress(zl.ZarrLakeError):
                    s.abandon()
                if not isinstance(e, zl.ConflictError):
                    break
                continue
            acks.append(
                {"cid": cid, "sid": s.id, "blind": blind, "chunks": chunks, "tag": tag, "w": index}
            )
            break
    injected = {"storage_errors": 0, "storage_lost": 0, "meta_errors": 0, "meta_lost": 0}
    if faults:
        blobs, meta = (
            repo._context.object_store.inner,
            repo._context.meta.inner,
        )  # Retrying(Faulty(raw))
        injected = {
            "storage_errors": blobs.errors_injected,
            "storage_lost": blobs.responses_lost,
            "meta_errors": meta.errors_injected,
            "meta_lost": meta.responses_lost,
        }
        below = getattr(meta.inner, "store", None)  # a bucket metastore's own storage
        injected["below_meta_lost"] = getattr(below, "responses_lost", 0)
    Path(out).write_text(json.dumps({"acks": acks, "fails": fails, "faults": injected}))


def run_workers(
    location: str,
    metastore: str | None,
    n_procs: int,
    n_txns: int,
    out_dir: Path,
    faults: str | None = None,
    timeout: float = 400.0,
    storage_options: dict | None = None,
) -> list[dict]:
    """Start `n_procs` spawned workers together, join them all, return their records."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n_procs)
    procs = []
    for i in range(n_procs):
        fault_spec = f"{faults},seed={1000 + i}" if faults else None
        out = str(out_dir / f"worker-{i}.json")
        p = ctx.Process(
            target=worker,
            args=(
                location,
                metastore,
                i,
                n_txns,
                7919 * i + 1,
                fault_spec,
                barrier,
                out,
                storage_options,
            ),
        )
        p.start()
        procs.append(p)
    try:
        for p in procs:
            p.join(timeout)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    codes = [p.exitcode for p in procs]
    assert codes == [0] * n_procs, f"worker exit codes {codes}"
    return [json.loads((out_dir / f"worker-{i}.json").read_text()) for i in range(n_procs)]


def state_at(repo: zl.Repo, commit_id: str) -> tuple[list[int], int]:
    s = repo.readonly_session(commit_id)
    return [_int(s.read(COUNTER_KEY.format(c))) for c in range(COUNTERS)], _int(s.read(LAST_KEY))


def check_history(repo: zl.Repo, results: list[dict], setup_head: str) -> dict[str, int]:
    """Verify the branch history is a serial order of exactly the acknowledged transactions
    and that the stored state after each commit is that order's replay. Returns figures."""
    acks = [a for r in results for a in r["acks"]]
    fails = [f for r in results for f in r["fails"]]
    by_sid = {a["sid"]: a for a in acks}
    failed = {f["sid"] for f in fails}
    history = []
    for c in repo.log("main"):
        if c.id == setup_head:
            break
        history.append(c)
    history.reverse()
    ids = {c.id for c in history}
    lost = [a["cid"] for a in acks if a["cid"] not in ids]
    phantom = [c.id for c in history if c.session_id in failed]
    unexplained = [c.id for c in history if c.session_id not in by_sid]
    assert not lost, f"acknowledged commits missing from the branch: {lost}"
    assert not phantom, f"commits of sessions reported as failed: {phantom}"
    assert not unexplained, f"commits nobody acknowledged: {unexplained}"
    assert len(history) == len(acks), "a commit appears twice or an ack has no commit"
    assert all(by_sid[c.session_id]["cid"] == c.id for c in history)

    counters, last = state_at(repo, setup_head)
    assert counters == [0] * COUNTERS and last == 0
    for c in history:
        a = by_sid[c.session_id]
        if a["blind"]:
            last = a["tag"]
        else:
            for k in a["chunks"]:
                counters[k] += 1
        assert state_at(repo, c.id) == (counters, last), f"state after {c.id} is not the replay"
    expected = Counter(k for a in acks if not a["blind"] for k in a["chunks"])
    assert counters == [expected[k] for k in range(COUNTERS)]
    final = zarr.open_group(repo.readonly_session("main").store, mode="r")
    assert final["counters"][:].tolist() == counters
    assert int(final["last"][0]) == last
    unexpected = [f for f in fails if f["error"] != "ConflictError"]
    assert not unexpected, f"transactions failed other than by conflict: {unexpected[:3]}"
    return {
        "commits acknowledged": len(acks),
        "attempts failed by conflict": len(fails),
        "lost": len(lost),
        "phantom": len(phantom),
    }
