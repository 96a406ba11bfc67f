"""A committer's branch compare-and-swap is delayed in the network (a TCP proxy holds it for
a few seconds, as a retransmission or a congested link would) and the committer is
SIGKILLed while it waits for the reply. Recovery finds the committer "known dead" (same
host, pid gone) and the attempt not on the branch, so it REOPENS the session at once
(txn/commit.py `recovered`: `alive is False` -> Status.OPEN). A worker joins, writes and
its flush() is acknowledged. Then the delayed UPDATE reaches PostgreSQL and lands: the
branch holds the session's commit without the acknowledged write. The next commit of the
session finds the first (SessionLanded) and raises; the worker's acknowledged write is in
no commit.

Usage: python repro_dead_committer_late_cas.py WORKDIR POSTGRES_URL
  (POSTGRES_URL as printed by `python -m zarrlake.testing.servers`)
Prints a VERDICT line. Stops every process and thread it started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import numpy as np

HERE = os.path.abspath(__file__)
HOLD = 4.0  # seconds the proxy holds client->server bytes once the flag file exists
N = 256


class Proxy:
    def __init__(self, upstream: tuple[str, int], flag: str) -> None:
        self.upstream = upstream
        self.flag = flag
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.closing = False
        self.held = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            threading.Thread(target=self._c2s, args=(c, u), daemon=True).start()
            threading.Thread(target=self._s2c, args=(u, c), daemon=True).start()

    def _c2s(self, c: socket.socket, u: socket.socket) -> None:
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if os.path.exists(self.flag):
                self.held += 1
                time.sleep(HOLD)  # the request is in flight
            try:
                u.sendall(data)
            except OSError:
                break
        time.sleep(2.0)  # let the server finish what it was sent
        for s in (c, u):
            try:
                s.close()
            except OSError:
                pass

    def _s2c(self, u: socket.socket, c: socket.socket) -> None:
        while True:
            try:
                data = u.recv(65536)
            except OSError:
                return
            if not data:
                return
            try:
                c.sendall(data)
            except OSError:
                pass  # the client is gone: drop the replies

    def close(self) -> None:
        self.closing = True
        self.sock.close()


def role_committer(path: str, meta: str, sid: str, flag: str) -> None:
    import zarrlake as zl
    from zarrlake.vc import commit_protocol

    orig = commit_protocol.update_branch

    def delayed(refs, branch, new, expected_version, landing=None):  # adapted: + landing
        open(flag, "w").close()  # from here on the proxy holds this process's requests
        print(f"CAS {new[:12]}", flush=True)
        return orig(refs, branch, new, expected_version, landing)

    commit_protocol.update_branch = delayed
    repo = zl.Repo.open(path, metastore=meta)
    s = repo.join_session(sid)
    s.commit("committer that dies")


def main() -> None:
    work = os.path.abspath(sys.argv[1])
    pg = sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, f"repo-{os.getpid()}")
    flag = os.path.join(work, f"hold-{os.getpid()}")
    import zarr

    import zarrlake as zl

    u = urlsplit(pg)
    proxy = Proxy((u.hostname, u.port), flag)
    via = urlunsplit(u._replace(netloc=f"{u.username}:{u.password}@127.0.0.1:{proxy.port}"))
    repo = zl.Repo.create(path, metastore=pg)
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("a", shape=(4 * N,), chunks=(N,), dtype="i8", fill_value=0)
    s.commit("create a")
    s = repo.create_session("main", message="job")
    zarr.open_array(s.store, path="a")[0:N] = 1
    s.flush()
    sid = s.id
    c = subprocess.Popen([sys.executable, HERE, "--committer", path, via, sid, flag],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = c.stdout.readline()
        print("[committer]", line.strip())
        if not line.startswith("CAS"):
            print("VERDICT: INCONCLUSIVE (committer did not reach its CAS)")
            return
        time.sleep(0.5)
        c.kill()
        c.wait()
        print(f"[parent] committer SIGKILLed while its branch CAS is in flight (held {proxy.held})")
        w = repo.join_session(sid)  # recovery: committer dead, attempt not on the branch
        print("[parent] worker joined; session", w.status)
        zarr.open_array(w.store, path="a")[N : 2 * N] = 2
        w.flush()
        print("[parent] worker flush of a[N:2N]=2 ACKNOWLEDGED")
        time.sleep(HOLD + 3)
        head = repo.resolve("main")
        info = repo.commit_info(head)
        print(f"[parent] main -> {head[:12]} ({info.message!r}, session {info.session_id})")
        got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[:]
        print("[parent] main a[N:2N] =", got[N : N + 3], "...")
        try:
            cid = w.commit("the worker's commit")
            print("[parent] second commit landed", cid[:12])
        except Exception as e:  # noqa: BLE001
            print(f"[parent] commit raised {type(e).__name__}: {str(e)[:300]}")
        got = zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[:]
        print("[parent] session now:", repo.session_info(sid).describe())
        sids = [x.session_id for x in repo.log("main")]
        if sids.count(sid) > 1:
            print("VERDICT: BUG - session committed twice")
        elif info.session_id == sid and not (got[N : 2 * N] == 2).all():
            print("VERDICT: BUG - an acknowledged flush is in no commit: the dead committer's "
                  "delayed CAS landed after recovery reopened the session")
        else:
            print("VERDICT: HELD")
    finally:
        if c.poll() is None:
            c.kill()
            c.wait()
        proxy.close()
        if os.path.exists(flag):
            os.unlink(flag)


if __name__ == "__main__":
    if sys.argv[1] == "--committer":
        role_committer(*sys.argv[2:6])
    else:
        main()
