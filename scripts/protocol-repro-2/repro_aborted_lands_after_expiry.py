"""A committer paused between its fence (lease renewal recording the attempt) and its branch
compare-and-swap is aborted (alive, past its lease). gc keeps an aborted session's staged
data only while `SessionRecord.may_land` says so, i.e. until the *session's expiry*; after
it, the session's fragments and uploads are deleted. When the committer resumes, its branch
CAS still lands (nothing else moved the branch): `commit()` returns a commit id, and the
branch now points at a commit whose data (and, with gc --full, whose commit record,
snapshot and manifests) were deleted. `main` is unreadable until repaired by hand.

Modes (default "pause"):
  pause   no clock skew. The session is created with expires_in=20 s and the repository with
          commit_timeout=1 (lease = 61 s) to keep the run short; the committer is stopped
          (SIGSTOP) ~70 s, then `gc(older_than=0, full=True)` runs, then SIGCONT.
          With the defaults the same happens for any commit that starts late in its session
          (24 h expiry) and pauses past its 120 s lease and the session's end.
  skew    default settings and expiry (24 h, lease 120 s); the committer is stopped a few
          seconds only; the gc process's clock runs 25 h ahead (runtime clock hook).

Usage: python repro_aborted_lands_after_expiry.py WORKDIR [pause|skew]
Prints a VERDICT line. Stops every process it started.
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
N = 256


def role_committer(path: str, sid: str) -> None:
    import zarrlake as zl
    from zarrlake.vc import commit_protocol

    orig = commit_protocol.update_branch

    def paused(refs, branch, new, expected_version, landing=None):  # adapted: + landing
        print(f"[committer] fenced attempt {new[:12]}; stopping before the branch CAS", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        print("[committer] resumed; sending the branch CAS", flush=True)
        return orig(refs, branch, new, expected_version, landing)

    commit_protocol.update_branch = paused
    repo = zl.Repo.open(path)
    s = repo.join_session(sid)
    try:
        cid = s.commit("the paused commit")
        print(f"[committer] commit() RETURNED {cid}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"[committer] commit() raised {type(e).__name__}: {str(e)[:300]}", flush=True)


def role_gc(path: str, skew: bool) -> None:
    import zarrlake as zl
    from zarrlake._util import runtime

    if skew:
        real = time.time
        object.__setattr__(runtime.REAL, "now", lambda: real() + 25 * 3600.0)
    repo = zl.Repo.open(path)
    sid = os.environ["SID"]
    print("[gc] session before:", repo.session_info(sid).describe(), flush=True)
    rep = repo.gc(older_than=timedelta(0), full=True)
    print(f"[gc] deleted {rep.objects_deleted} objects {rep.by_kind}", flush=True)
    print("[gc] session after:", repo.session_info(sid).describe(), flush=True)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def main() -> None:
    work = os.path.abspath(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "pause"
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, f"repo-{mode}-{os.getpid()}")
    import zarr

    import zarrlake as zl

    settings = {"commit_timeout": 1.0} if mode == "pause" else None
    expiry = timedelta(seconds=20) if mode == "pause" else timedelta(hours=24)
    repo = zl.Repo.create(path, settings=settings)
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("a", shape=(4 * N,), chunks=(N,), dtype="i8", fill_value=0)
    s.commit("create a")
    s = repo.create_session("main", message="job", expires_in=expiry)
    a = zarr.open_array(s.store, path="a")
    a[:] = np.arange(4 * N)
    s.flush()
    sid = s.id
    print("session", sid, "flushed; expires", s.expires_at)

    procs: list[subprocess.Popen] = []
    try:
        c = subprocess.Popen([sys.executable, HERE, path, "committer", sid])
        procs.append(c)
        deadline = time.time() + 60
        while not stopped(c.pid):
            if c.poll() is not None or time.time() > deadline:
                print("VERDICT: INCONCLUSIVE (committer did not reach its branch CAS)")
                return
            time.sleep(0.05)
        print(f"[parent] committer {c.pid} stopped between its fence and its branch CAS")
        if mode == "pause":
            print("[parent] waiting 70 s: past the 61 s lease and the 20 s session expiry")
            time.sleep(70)
        env = dict(os.environ, SID=sid)
        g = subprocess.run([sys.executable, HERE, path, "gc", mode], env=env, timeout=200)
        print("[parent] gc exited", g.returncode)
        os.kill(c.pid, signal.SIGCONT)
        c.wait(timeout=120)
        procs.remove(c)
        repo = zl.Repo.open(path)
        head = repo.resolve("main")
        print("[parent] main ->", head[:12], "; session:", repo.session_info(sid).describe())
        try:
            got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[:]
            ok = bool((got == np.arange(4 * N)).all())
            print("[parent] read main a ->", got[:4], "... matches:", ok)
        except Exception as e:  # noqa: BLE001
            ok = False
            print(f"[parent] read main RAISED {type(e).__name__}: {str(e)[:300]}")
        try:
            print("[parent] fsck:", str(repo.fsck())[:500])
        except Exception as e:  # noqa: BLE001
            print(f"[parent] fsck raised {type(e).__name__}: {str(e)[:300]}")
        if ok:
            print("VERDICT: HELD")
        else:
            print(f"VERDICT: BUG - an aborted commit landed after gc deleted its data ({mode}); "
                  "main is unreadable")
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "committer":
        role_committer(sys.argv[1], sys.argv[3])
    elif len(sys.argv) > 3 and sys.argv[2] == "gc":
        role_gc(sys.argv[1], sys.argv[3] == "skew")
    else:
        main()
