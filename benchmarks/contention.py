"""Writers contending on a bucket-only repository: N processes making one-chunk commits on
one branch against moto's S3 server, each counting its object-storage requests by kind
and partition (and the conditional PUTs refused with 412); printed per commit, with the
CPU time of the writers and of the server.

    python -m benchmarks.contention [--writers 8] [--commits 10] [--random]

What W6 of the S3BUCKET group measures as throughput, taken apart: on 2 cores moto serves
every request on one core, so its CPU per request times the requests of a commit bounds
the commits per second; refused conditional writes are the queueing on shared heads.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

CALLS = (
    "get",
    "put",
    "put_if_absent",
    "delete",
    "delete_if",
    "list_modified",
    "get_tagged",
    "put_if",
)


def _kind(key: str) -> str:
    """The partition (`meta/<repo>~2f<name>...`) or object prefix a key belongs to."""
    if key.startswith("meta/") and "~2f" in key:
        return "meta:" + key.split("/")[1].split("~2f")[1]
    return key.split("/")[0]


def _count_requests() -> collections.Counter:
    """Count every object-storage call of this process by (call, kind)."""
    import zarrlake.storage.base as base
    from zarrlake.errors import CASFailedError

    calls: collections.Counter = collections.Counter()
    lock = threading.Lock()
    for cls in [c for c in vars(base).values() if isinstance(c, type) and "_put_if" in vars(c)]:
        for name in CALLS:
            method = getattr(cls, name)

            def counted(self: Any, *args: Any, _m: Any = method, _n: str = name, **kw: Any) -> Any:
                what = _kind(str(args[0])) if args else ""
                try:
                    return _m(self, *args, **kw)
                except CASFailedError:
                    with lock:
                        calls[(_n + " refused", what)] += 1
                    raise
                finally:
                    with lock:
                        calls[(_n, what)] += 1

            setattr(cls, name, counted)
    return calls


def writer(location: str, options: dict, me: int, commits: int, random: bool = False) -> dict:
    """One writer: waits for a line on stdin, then makes its one-chunk commits (`random`:
    of random values, uploaded as W6's are; else constant ones, staged inline)."""
    import numpy as np
    import zarr

    import zarrlake as zl
    from zarrlake.errors import ConflictError

    calls = _count_requests()
    repo = zl.Repo.open(location, storage_options=options)
    print("READY", flush=True)
    sys.stdin.readline()
    cpu0 = sum(os.times()[:2])
    retries = 0
    for j in range(commits):
        k = me * commits + j
        while True:
            s = repo.create_session("main")
            value = (
                np.random.default_rng(k).random((64, 64), dtype="f4")
                if random
                else np.full((64, 64), k + 1, "f4")
            )
            zarr.open_array(s.store, path="a")[k] = value
            try:
                s.commit(f"writer {me} chunk {k}")
                break
            except ConflictError:
                retries += 1
    repo.close()
    return {
        "cpu": sum(os.times()[:2]) - cpu0,
        "retries": retries,
        "calls": [[a, b, n] for (a, b), n in calls.items()],
    }


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--commits", type=int, default=10, help="per writer")
    ap.add_argument(
        "--random", action="store_true", help="random chunks, uploaded (as W6's); else inline"
    )
    args = ap.parse_args()
    import zarr

    import zarrlake as zl
    from zarrlake.testing.servers import running_moto, s3_client, s3_options

    with running_moto() as endpoint:
        s3_client(endpoint).create_bucket(Bucket="contention")
        options, location = s3_options(endpoint), "s3://contention/repo"
        repo = zl.Repo.create(location, storage_options=options)
        s = repo.create_session("main")
        n = args.writers * args.commits
        zarr.create_array(s.store, name="a", shape=(n, 64, 64), chunks=(1, 64, 64), dtype="f4")
        s.commit("array a")
        repo.close()
        children = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True)
        server = int(children.stdout.split()[0])  # the server: no writer has started yet
        me = [sys.executable, "-m", "benchmarks.contention", "--writer", location]
        procs = [
            subprocess.Popen(
                [*me, json.dumps(options), str(i), str(args.commits), str(int(args.random))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(args.writers)
        ]
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "READY"
        cpu0, t0 = _server_cpu(server), time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        wall, server_cpu = time.perf_counter() - t0, _server_cpu(server) - cpu0
    total: collections.Counter = collections.Counter()
    for out in outs:
        for call, what, count in out["calls"]:
            total[(call, what)] += count
    requests = sum(v for (call, _), v in total.items() if not call.endswith("refused"))
    print(
        f"{args.writers} writers x {args.commits} commits: {n / wall:.2f} commits/s, "
        f"{requests / n:.1f} requests per commit, {sum(o['retries'] for o in outs)} retries; "
        f"CPU: writers {sum(o['cpu'] for o in outs):.1f} s, server {server_cpu:.1f} s, "
        f"wall {wall:.1f} s"
    )
    for (call, what), count in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"  {call:22} {what:18} {count / n:6.2f} per commit")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        location, options, me, commits, random = sys.argv[2:7]
        print(
            json.dumps(writer(location, json.loads(options), int(me), int(commits), random == "1"))
        )
    else:
        main()
