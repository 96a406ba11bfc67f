"""A session whose creation is paused between reading its branch head (its base B) and
writing its session record, across a commit C on the branch and a whole `expire` run: B is
no longer a head, no session names it yet, so expire drops it (`protected()` reads sessions
and refs; neither shows B). The session then opens on an expired base. Its commit fails,
and every gc run fails (marking from the session's base raises ExpiredHistoryError) for as
long as the session stays open (24 h by default).

Seen first in stress.py (PostgreSQL, expire every ~1 s with older_than 2-5 s, random
SIGSTOPs): one gc run failed with ExpiredHistoryError. Here the pause is a SIGSTOP injected
in `SessionRecords.new` of the creating process.

Usage: python repro_expire_session_base.py WORKDIR
With gc(older_than=0) the base's snapshot and manifests are deleted under the open
session: its reads of data it did not write fail.
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


def role_creator(path: str) -> None:
    import zarr

    import zarrlake as zl
    from zarrlake import session_records

    # adapted: a session's record is now written before its branch's head is read, and
    # names the base read by a compare-and-swap after it: the pause goes there
    orig = session_records.SessionRecords.swap
    armed = [True]

    def paused_swap(self, *a, **kw):
        if armed[0]:
            armed[0] = False
            print("[creator] read the head; stopping before the session record names it",
                  flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return orig(self, *a, **kw)

    session_records.SessionRecords.swap = paused_swap
    repo = zl.Repo.open(path)
    s = repo.create_session("main")
    print(f"[creator] session {s.id} open on base {s.base_commit[:12]}", flush=True)
    zarr.open_array(s.store, path="a")[0:8] = 5
    s.flush()
    time.sleep(2.5)  # the parent runs gc now
    try:
        ro = zarr.open_array(s.store, path="a", mode="r")[:]
        print(f"[creator] read its base data: a[16:20] = {ro[16:20]}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"[creator] reading its base data RAISED {type(e).__name__}: {str(e)[:160]}", flush=True)
    try:
        cid = s.commit("creator")
        print(f"[creator] committed {cid[:12]}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"[creator] commit RAISED {type(e).__name__}: {str(e)[:200]}", flush=True)


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
    import zarr

    import zarrlake as zl

    repo = zl.Repo.create(path)
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("a", shape=(64,), chunks=(8,), dtype="i8", fill_value=0)
    s.commit("create a")
    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[:] = np.arange(64)
    b = s.commit("B")
    time.sleep(1.1)
    c = subprocess.Popen([sys.executable, HERE, "--creator", path])
    try:
        t = time.time() + 60
        while not stopped(c.pid):
            if c.poll() is not None or time.time() > t:
                print("VERDICT: INCONCLUSIVE")
                return
            time.sleep(0.05)
        s = repo.create_session("main")
        zarr.open_array(s.store, path="a")[8:16] = 7
        s.commit("C")  # head moves past B
        rep = repo.expire(timedelta(seconds=1))
        print(f"[parent] expire: {rep.commits_expired} commits expired; B expired: "
              f"{repo.expired_at(b) is not None}")
        os.kill(c.pid, signal.SIGCONT)
        time.sleep(0.7)
        gc_failed = 0
        for _ in range(2):
            try:
                rep = repo.gc(older_than=timedelta(0))
                print(f"[parent] gc(older_than=0) deleted {rep.by_kind}")
            except Exception as e:  # noqa: BLE001
                gc_failed += 1
                print(f"[parent] gc RAISED {type(e).__name__}: {str(e)[:160]}")
        c.wait(timeout=60)
    finally:
        if c.poll() is None:
            os.kill(c.pid, signal.SIGCONT)
            c.kill()
            c.wait()
    if gc_failed or repo.expired_at(b) is not None:
        print("VERDICT: BUG - an open session's base commit was expired (its snapshot and "
              f"manifests then deleted by gc(older_than=0); see the creator's lines); gc "
              f"failed {gc_failed}/2 runs")
    else:
        print("VERDICT: HELD")


if __name__ == "__main__":
    if sys.argv[1] == "--creator":
        role_creator(sys.argv[2])
    else:
        main()
