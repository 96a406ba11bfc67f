"""Single-client compare-and-swap throughput of each metastore backend (ops/s).

Each op is one `set_if` incrementing a counter, with the version taken from the previous
op's answer (no re-read), so it measures the CAS round trip alone.

    python benchmarks/metastore_cas.py                      # memory, sqlite, sqlite-full
    python benchmarks/metastore_cas.py --postgres-local     # also a throwaway PostgreSQL
    python benchmarks/metastore_cas.py --url postgresql://user:pw@host:5432/db
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zarrlake.metastore import open_metastore


def cas_ops_per_second(url: str, seconds: float) -> tuple[float, int]:
    """(ops/s, ops) of back-to-back CAS increments on one key for about `seconds`."""
    meta = open_metastore(url)
    try:
        partition = f"bench-{uuid.uuid4().hex}"
        version = meta.set_if(partition, b"counter", b"0", None)
        for i in range(50):  # warm up connections and prepared statements
            version = meta.set_if(partition, b"counter", str(i).encode(), version)
        ops = 0
        began = time.perf_counter()
        deadline = began + seconds
        while time.perf_counter() < deadline:
            for _ in range(100):
                version = meta.set_if(partition, b"counter", str(ops).encode(), version)
                ops += 1
        elapsed = time.perf_counter() - began
        meta.drop_partition(partition)
        return ops / elapsed, ops
    finally:
        meta.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", action="append", default=[], help="extra metastore URL")
    parser.add_argument("--postgres-local", action="store_true", help="start a local server")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        urls = {
            "memory": f"memory://bench-{uuid.uuid4().hex}",
            "sqlite (synchronous=normal)": f"sqlite:///{tmp}/normal.db",
            "sqlite (synchronous=full)": f"sqlite:///{tmp}/full.db?synchronous=full",
        }
        urls.update({u.split("@")[-1]: u for u in args.url})
        if args.postgres_local:
            from tests.fixtures.postgres import running_postgres

            urls["postgres (local, fsync off)"] = stack.enter_context(running_postgres())
        for name, url in urls.items():
            rate, ops = cas_ops_per_second(url, args.seconds)
            print(f"{name:32s} {rate:10.0f} CAS ops/s  ({ops} ops)")


if __name__ == "__main__":
    main()
