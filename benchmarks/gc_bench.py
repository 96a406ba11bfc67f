"""GC benchmark (issue 12): on a W7-like repository (N 1 KiB chunks in one commit), the time
of an incremental gc that deletes 1,000 garbage chunk objects (known to the metastore: an
expired session's uploads) against a full mark-and-sweep (listing every object) deleting
the same amount, and the repository's bytes on disk before and after the first gc (which
vacuums SQLite: W7's chunks were staged there before the commit packed them).

    python -m benchmarks.gc_bench [--chunks 200000] [--garbage 1000] [--json OUT]

`gc_step` is the same measurement as a step of `make bench` (group GC in run.py): it runs
in its own process on the repository W7's build step made, for zarrlake and Icechunk.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

import zarrlake as zl

ZERO = timedelta(0)


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def build(location: Path, n: int) -> zl.Repo:
    """n chunks of 256 float32 (1 KiB before zstd level 0, as W7 writes them) staged in
    the metastore and packed by one commit."""
    from numcodecs import Zstd

    codec = Zstd(level=0)
    repo = zl.Repo.create(location)
    s = repo.create_session()
    rng = np.random.default_rng(7)
    s.write("big/zarr.json", json.dumps({"zarr_format": 3, "node_type": "group"}).encode())
    for start in range(0, n, 10_000):
        rows = rng.random((min(10_000, n - start), 256), dtype=np.float32)
        s.write_many(
            [(f"big/c/{start + i}/0", codec.encode(r.tobytes())) for i, r in enumerate(rows)]
        )
    s.commit("big manifest")
    return repo


def make_garbage(repo: zl.Repo, count: int, seed: int | None, known: bool) -> None:
    """`count` 16 KiB chunk objects: uploaded by a session that then expired (`known` to
    the metastore), or by a job that died before staging anything (found only by listing)."""
    rng = np.random.default_rng(seed)
    chunks = [rng.integers(0, 256, 16384, dtype=np.uint8).tobytes() for _ in range(count)]
    if not known:
        repo._context.objects.map(repo._context.objects.put_chunk, chunks)
        return
    s = repo.create_session()
    s.write_many([(f"junk/c/{i}", data) for i, data in enumerate(chunks)])
    s.flush()  # staged: the metastore knows them
    repo._context.records.update(s.id, lambda r: r.__class__(**{**r.__dict__, "expires_at": 0}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=200_000)
    ap.add_argument("--garbage", type=int, default=1000)
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zl-gc-bench-") as tmp:
        location = Path(tmp) / "repo"
        t0 = time.perf_counter()
        repo = build(location, args.chunks)
        build_s = time.perf_counter() - t0
        before = disk_bytes(location)

        t0 = time.perf_counter()
        first = repo.gc(ZERO)  # upkeep after the build: the metastore's freed pages go back
        first_s = time.perf_counter() - t0
        after = disk_bytes(location)

        make_garbage(repo, args.garbage, 1, known=True)
        repo = zl.Repo.open(location)  # cold caches for each run
        t0 = time.perf_counter()
        inc = repo.gc(ZERO)
        inc_s = inc.seconds

        make_garbage(repo, args.garbage, 2, known=False)
        repo = zl.Repo.open(location)
        full = repo.gc(ZERO, full=True)
        full_s = full.seconds
        assert inc.by_kind["chunks"][0] == args.garbage, inc
        assert full.by_kind["chunks"][0] == args.garbage, full
        assert not repo.fsck()
        figures = {
            "chunks": args.chunks,
            "garbage_objects": args.garbage,
            "build_s": round(build_s, 2),
            "gc_incremental_s": round(inc_s, 3),
            "gc_full_s": round(full_s, 3),
            "first_gc_after_build_s": round(first_s, 3),
            "full_over_incremental": round(full_s / inc_s, 1),
            "bytes_on_disk_before_gc": before,
            "bytes_on_disk_after_gc": after,
            "metastore_bytes_freed": first.metastore_bytes_freed,
            "objects_after_gc": sum(1 for _ in repo._context.object_store.list("")),
        }
        repo.close()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


def gc_step(engine: Any, path: str, p: dict) -> dict:
    """Bench step (run.py group GC) on the W7 build at `path`. zarrlake: the first gc after
    the build (vacuums the metastore), then an incremental gc deleting `gc_garbage` known
    garbage chunks, then a full gc deleting as many unknown ones. Icechunk: its only gc
    (which lists every chunk) deleting `gc_garbage` chunks a discarded session uploaded.
    Bytes on disk before and after, for both."""
    count = p["gc_garbage"]
    location = Path(path)
    before = disk_bytes(location)
    if engine.name == "icechunk":
        return {"bytes_before_gc": before, **_icechunk_gc(engine, path, count)}
    repo = zl.Repo.open(location)
    first = repo.gc(ZERO)
    after_first = disk_bytes(location)
    make_garbage(repo, count, None, known=True)
    repo.close()
    repo = zl.Repo.open(location)  # cold caches for each run
    inc = repo.gc(ZERO)
    make_garbage(repo, count, None, known=False)
    repo.close()
    repo = zl.Repo.open(location)
    full = repo.gc(ZERO, full=True)
    if inc.by_kind.get("chunks", (0, 0))[0] != count:
        raise AssertionError(f"incremental gc deleted {inc.by_kind}, not {count} chunks")
    if full.by_kind.get("chunks", (0, 0))[0] != count:
        raise AssertionError(f"full gc deleted {full.by_kind}, not {count} chunks")
    repo.close()
    return {
        "gc_incremental_s": inc.seconds,
        "gc_full_s": full.seconds,
        "full_over_incremental": full.seconds / inc.seconds,
        "first_gc_s": first.seconds,
        "bytes_before_gc": before,
        "bytes_after_first_gc": after_first,
        "bytes_after_gc": disk_bytes(location),
        "metastore_bytes_freed": first.metastore_bytes_freed,
    }


def _icechunk_gc(engine: Any, path: str, count: int) -> dict:
    import asyncio
    from datetime import UTC, datetime

    from zarr.core.buffer import default_buffer_prototype

    engine.open(path)
    store = engine.begin()  # a session that uploads `count` chunks and is then dropped
    buf = default_buffer_prototype().buffer
    rng = np.random.default_rng()
    chunks = [
        buf.from_bytes(rng.integers(0, 256, 16384, dtype=np.uint8).tobytes()) for _ in range(count)
    ]

    async def put() -> None:
        await asyncio.gather(*(store.set(f"a/c/{i}/0", c) for i, c in enumerate(chunks)))

    asyncio.run(put())
    engine.session = None
    t0 = time.perf_counter()
    summary = engine.repo.garbage_collect(datetime.now(UTC))
    seconds = time.perf_counter() - t0
    if summary.chunks_deleted != count:
        raise AssertionError(f"Icechunk gc deleted {summary.chunks_deleted}, not {count} chunks")
    after = disk_bytes(Path(path))
    return {"gc_incremental_s": seconds, "gc_full_s": seconds, "bytes_after_gc": after}


if __name__ == "__main__":
    main()
