"""A collector paused inside a delete batch deletes a dedup-hit chunk that a writer has
verified and committed meanwhile: committed data is lost.

The fence of a sweep is only checked before each delete batch (`GcState.may_delete` and
`refresh` in lifecycle/gc.py `sweep`): a collector that stops (SIGSTOP, a GC pause, a VM
freeze) after that check but before its DELETEs go out still sends them when it resumes.
Writers that met the sweep wait for it only until its deadline *by their own clock*
(`WriteGuard._wait`), then end it, check their dedup-hit objects still exist (they do: the
collector is stopped) and acknowledge. The commit lands. The collector resumes and deletes
the chunk the new commit references.

Two ways to reach the writer's "deadline passed":
  default     the writer's clock runs 700 s ahead (runtime clock hook; SWEEP_TTL is 600 s),
              the collector is stopped for a few seconds only;
  --no-skew   no clock skew; SWEEP_TTL is lowered to 60 s in every process (to keep the run
              short; with the default 600 s the pause has to be > 10 min) and the collector
              is stopped for 75 s.

Usage: python repro_gc_paused_batch.py WORKDIR [--no-skew]
Prints a VERDICT line.  Stops every process it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import numpy as np

HERE = os.path.abspath(__file__)
N = 4096  # float64 chunk = 32 KiB > stage_inline_max (8 KiB): stored as chunks/<digest>
B = np.random.default_rng(7).random(N)  # incompressible: stays > 8 KiB after the codec


def lower_ttl() -> None:
    from zarrlake.vc import gc_protocol

    gc_protocol.SWEEP_TTL = 60.0


def role_gc(path: str) -> None:
    import zarrlake as zl
    from zarrlake.lifecycle import gc as gcmod

    if "--no-skew" in sys.argv:
        lower_ttl()
    orig = gcmod.Collector._delete

    def paused_delete(self, keys):  # adapted: a batch is now FencedDeletes (keys in .tags)
        print(f"[gc] about to delete {len(keys.tags)} keys: {list(keys.tags)}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # a pause between the fence check and the DELETEs
        print("[gc] resumed, deleting now", flush=True)
        return orig(self, keys)

    gcmod.Collector._delete = paused_delete
    rep = zl.Repo.open(path).gc(older_than=timedelta(0))
    print(f"[gc] done: deleted {rep.objects_deleted} objects {rep.by_kind}", flush=True)


def role_writer(path: str) -> None:
    import zarr

    import zarrlake as zl
    from zarrlake._util import runtime

    if "--no-skew" in sys.argv:
        lower_ttl()
    else:
        real = time.time
        object.__setattr__(runtime.REAL, "now", lambda: real() + 700.0)  # clock 700 s ahead
    repo = zl.Repo.open(path)
    s = repo.create_session("main", message="writer reuses the garbage chunk's bytes")
    a = zarr.open_array(s.store, path="a")
    t0 = time.time()
    a[N : 2 * N] = B  # same bytes as the abandoned upload: a dedup hit
    s.flush()
    print(f"[writer] flush acknowledged after {time.time() - t0:.1f}s", flush=True)
    cid = s.commit("chunk 1 = B")
    print(f"[writer] commit {cid} acknowledged", flush=True)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def main() -> None:
    work = os.path.abspath(sys.argv[1])
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, f"repo-{os.getpid()}")
    skew = "--no-skew" not in sys.argv
    import zarr

    import zarrlake as zl

    repo = zl.Repo.create(path)
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("a", shape=(4 * N,), chunks=(N,), dtype="f8", fill_value=0)
    s.commit("create a")
    # garbage: an abandoned session uploaded a chunk object with bytes B
    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[0:N] = B
    s.flush()
    s.abandon()
    print("abandoned session left chunk object(s) as gc candidates")

    procs: list[subprocess.Popen] = []
    try:
        extra = [] if skew else ["--no-skew"]
        gc = subprocess.Popen([sys.executable, HERE, path, "gc", *extra], env=os.environ)
        procs.append(gc)
        deadline = time.time() + 120
        while not stopped(gc.pid):
            if gc.poll() is not None or time.time() > deadline:
                print("VERDICT: INCONCLUSIVE (gc did not reach its delete batch)")
                return
            time.sleep(0.1)
        print(f"[parent] gc pid {gc.pid} is stopped inside its delete batch")
        if not skew:
            print("[parent] keeping it stopped 75 s (past the lowered 60 s sweep deadline)")
            time.sleep(75)
        w = subprocess.run([sys.executable, HERE, path, "writer", *extra], env=os.environ,
                           timeout=200)
        print(f"[parent] writer exited {w.returncode}")
        os.kill(gc.pid, signal.SIGCONT)
        gc.wait(timeout=120)
        procs.remove(gc)
        if w.returncode != 0:
            print("VERDICT: HELD (the writer's commit was refused)")
            return
        repo = zl.Repo.open(path)
        try:
            got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[N : 2 * N]
            ok = bool((got == B).all())
            print("[parent] read main a[N:2N] ->", got[:3], "...")
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"[parent] read main a[N:2N] RAISED {type(e).__name__}: {str(e)[:300]}")
        try:
            rep = repo.fsck()
            print("[parent] fsck:", str(rep)[:400])
        except Exception as e:  # noqa: BLE001
            print(f"[parent] fsck raised {type(e).__name__}: {str(e)[:300]}")
        if ok:
            print("VERDICT: HELD (the committed chunk is readable)")
        else:
            print("VERDICT: BUG - an acknowledged commit's chunk was deleted by a paused gc "
                  f"({'writer clock +700 s' if skew else 'pause past the sweep deadline'})")
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "gc":
        role_gc(sys.argv[1])
    elif len(sys.argv) > 2 and sys.argv[2] == "writer":
        role_writer(sys.argv[1])
    else:
        main()
