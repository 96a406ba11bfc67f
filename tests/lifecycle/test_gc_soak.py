"""Soak: writer processes that often write identical chunks (dedup hits) and abandon many
sessions, while another process runs gc(older_than=0) in a loop. Each committed write reads
back from the head right after its commit (0 lost; the collector also expires all history
in its loop, so old values keep turning into garbage that writers hit again), each key at
the end holds its last committed value (0 phantom), and the repository checks clean. Small
here; ZARRLAKE_SOAK=1 (make soak) runs it larger.

Run as a module, this file is a worker: python -m tests.lifecycle.test_gc_soak writer DIR
SEED TXNS OUT, or python -m tests.lifecycle.test_gc_soak gc DIR STOPFILE OUT.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import zarrlake as zl
from tests.helpers.lifecycle import chunk, fsck, guarded_write
from zarrlake.errors import GcBusyError, StorageError, ZarrLakeError

ROOT = Path(__file__).resolve().parents[2]
SOAK = os.environ.get("ZARRLAKE_SOAK", "") not in ("", "0")
WRITERS, TXNS = (3, 60) if SOAK else (2, 12)
POOL = [chunk(7000 + i, 12_000) for i in range(6)]  # shared by all writers: dedup hits


def writer(location: str, seed: int, txns: int, out: str) -> None:
    rng = random.Random(seed)
    repo = zl.Repo.open(location)
    log = []
    for t in range(txns):
        s = repo.create_session()
        items = [(f"w{seed}/c/{rng.randrange(4)}", rng.choice(POOL)) for _ in range(3)]
        items = list(dict(items).items())
        try:
            guarded_write(s, items)
            if rng.random() < 0.35:
                if rng.random() < 0.5:
                    s.abandon()
                else:  # a job that died: its session runs out and gc expires it
                    repo._context.records.update(
                        s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0})
                    )
                continue
            cid = s.commit(f"w{seed} t{t}")
        except (StorageError, ZarrLakeError) as e:  # e.g. a put racing a delete: not acked
            log.append({"failed": repr(e)})
            continue
        writes = {k: hashlib.sha256(d).hexdigest() for k, d in items}
        head = repo.readonly_session()  # nobody else writes our keys: the head has them
        try:
            lost = sum(
                hashlib.sha256(head.read(k) or b"").hexdigest() != d for k, d in writes.items()
            )
        except zl.NotFoundError:
            lost = len(writes)
        log.append({"commit": cid, "writes": writes, "lost": lost})
    Path(out).write_text(json.dumps(log))


def collector(location: str, stop: str, out: str) -> None:
    repo = zl.Repo.open(location)
    runs = deleted = 0
    while not os.path.exists(stop):
        try:
            repo.expire(timedelta(0))  # old values become garbage that writers dedup-hit
            deleted += repo.gc(timedelta(0)).objects_deleted
            runs += 1
        except GcBusyError:
            continue
    deleted += repo.gc(timedelta(0), full=True).objects_deleted
    Path(out).write_text(json.dumps({"runs": runs + 1, "deleted": deleted}))


def test_soak_gc_against_deduplicating_writers(tmp_path) -> None:
    location = tmp_path / "repo"
    zl.Repo.create(location).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mod = [sys.executable, "-m", "tests.lifecycle.test_gc_soak"]
    stop = tmp_path / "stop"
    gc = subprocess.Popen(
        [*mod, "gc", str(location), str(stop), str(tmp_path / "gc.json")], env=env, cwd=ROOT
    )
    writers = [
        subprocess.Popen(
            [*mod, "writer", str(location), str(i), str(TXNS), str(tmp_path / f"w{i}.json")],
            env=env,
            cwd=ROOT,
        )
        for i in range(WRITERS)
    ]
    try:
        for p in writers:
            assert p.wait(timeout=600) == 0
    finally:
        stop.write_text("stop")
        for p in [*writers, gc]:
            if p.poll() is None and p is not gc:
                p.kill()
    assert gc.wait(timeout=300) == 0
    stats = json.loads((tmp_path / "gc.json").read_text())
    assert stats["runs"] >= 2 and stats["deleted"] > 0  # it really collected meanwhile

    repo = zl.Repo.open(location)
    lost, committed, last = 0, 0, {}
    for i in range(WRITERS):
        for entry in json.loads((tmp_path / f"w{i}.json").read_text()):
            if "commit" in entry:
                committed += len(entry["writes"])
                lost += entry["lost"]
                last.update(entry["writes"])
    assert committed > 0
    assert lost == 0
    head = repo.readonly_session()
    phantom = sum(hashlib.sha256(head.read(k) or b"").hexdigest() != d for k, d in last.items())
    assert phantom == 0
    assert fsck(repo) == []


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        collector(sys.argv[2], sys.argv[3], sys.argv[4])
