"""EXPORT (issue 52): `Repo.export` of a version as plain Zarr v3 against a plain parallel
copy of the same bytes, in the same run, into local directories.

One repository holds `export_chunks` chunks of 1 MiB (float32, no codec: the chunk objects
are exactly the bytes a reader gets). The plain copy (the "files" column) reads each chunk
object of the repository and writes it to a fresh directory, under the key the export
writes it to, 16 at once, through the same storage layer, with no checksum and no metadata.
The export does the same work plus what it is for: it resolves the version's manifest,
checks every chunk against its digest and writes the metadata documents. Both run in this
process, alternating which goes first, each into a fresh directory, after one untimed pass
that leaves the source in the page cache; a repetition runs both twice and keeps the best of
each (on a shared machine, a burst of other work slows one round, not both). The ratio is of
the two in the same repetition, and each side's process CPU seconds are recorded with it.
Beside them, the CPU seconds of one pass of the repository's content hash over the same
chunk objects on one thread (their reads not counted), and the ratio a copy that adds
exactly that to the plain copy's CPU would reach when both keep every core busy: plain copy
CPU / (plain copy CPU + hash CPU), the bound the check of every chunk sets.

The copies go to a directory in memory (/dev/shm) when the machine has one with room: on a
disk's file system a new file can cost far more than writing its bytes, and by how much
depends on what this and other processes deleted in the minutes before (ext4 without a
journal skips every recently freed inode when it allocates one: perf showed that search
taking most of both sides' CPU once a few rounds had been deleted), which is noise in a
comparison of two ways of writing the same files.

    python -m benchmarks.run --quick --only EXPORT
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.arrays import MIB, generate
from benchmarks.groups import Group, Results

SIZES = {"full": {"export_chunks": 256}, "quick": {"export_chunks": 32}}
NOTE = (
    "EXPORT (issue 52): {export_chunks} chunks of 1 MiB (float32, no codec) from a local "
    "repository into a directory in memory (/dev/shm where there is one); zarrlake = "
    "Repo.export (manifest walk, a digest check per chunk, metadata), files = a plain copy "
    "of the same chunk objects through the same storage layer, 16 at once, no checks; "
    "alternating, best of 2 rounds per repetition, same process, page cache warm "
    "(benchmarks/export.py)."
)
WORKERS = 16
ROUNDS = 2
"""Rounds of (copy, export) per repetition; each figure is the best of its rounds."""


def _build(path: Path, n: int) -> Any:
    import zarr

    import zarrlake as zl

    repo = zl.Repo.create(path)
    s = repo.create_session()
    a = zarr.create_array(
        s.store, name="x", shape=(n, 512, 512), chunks=(1, 512, 512), dtype="f4", compressors=None
    )
    for i in range(0, n, 16):
        a[i : i + 16] = generate((min(16, n - i), 512, 512), seed=i)
    s.commit("data")
    return repo


def _plain_copy(repo: Any, keys: list[str], dest: Path) -> int:
    """Copy the chunk objects to `dest`, WORKERS at once; returns the bytes copied."""
    from zarrlake.storage import open_storage

    dest.mkdir(parents=True)
    out = open_storage(str(dest))
    src = repo._context.object_store

    def one(item: tuple[int, str]) -> int:
        data = src.get(item[1])
        out.put(f"x/c/{item[0]}/0/0", data)
        return len(data)

    with ThreadPoolExecutor(WORKERS) as pool:
        total = sum(pool.map(one, enumerate(keys)))
    out.close()
    return total


def _hash_cpu(repo: Any, keys: list[str]) -> float:
    """CPU seconds of the repository's content hash over the chunk objects, one at a time
    on this thread (their reads not counted)."""
    from zarrlake.format.digest import digest

    src, algo = repo._context.object_store, repo._context.objects.algo
    total = 0.0
    for key in keys:
        data = src.get(key)
        c0 = time.process_time()
        digest(algo, data, spread=False)
        total += time.process_time() - c0
    return total


def _destinations(work: Path, n: int) -> Path:
    """A fresh directory for the copies: in /dev/shm when it has room for four of them at
    once (see the module), else in `work`."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 4 * n * MIB:
        return Path(tempfile.mkdtemp(prefix="zarrlake-bench-export-", dir=shm))
    (work / "copies").mkdir()
    return work / "copies"


def run(cfg: dict[str, Any], work: Path) -> Results:
    n = cfg["export_chunks"]
    repo = _build(work / "repo", n)
    keys = sorted(repo._context.object_store.list("chunks/"))
    assert len(keys) == n, (len(keys), n)
    out = _destinations(work, n)
    try:
        return _compare(cfg, repo, keys, out)
    finally:
        repo.close()
        shutil.rmtree(out, ignore_errors=True)


def _compare(cfg: dict[str, Any], repo: Any, keys: list[str], out: Path) -> Results:
    _plain_copy(repo, keys, out / "warm")  # the source into the page cache
    shutil.rmtree(out / "warm")
    records: dict[str, list[dict[str, Any]]] = {"zarrlake": [], "files": []}
    for rep in range(cfg["reps"]):
        got: dict[str, float] = {"copy": 0.0, "export": 0.0}
        cpu: dict[str, float] = {"copy": float("inf"), "export": float("inf")}
        order = ("copy", "export") if rep % 2 == 0 else ("export", "copy")
        for what in order * ROUNDS:  # the best of each: a load spike hits one round
            dest = out / f"{what}-{rep}"
            t0, c0 = time.perf_counter(), time.process_time()
            if what == "copy":
                size = _plain_copy(repo, keys, dest)
            else:
                size = repo.export("main", dest, workers=WORKERS).bytes
            seconds = time.perf_counter() - t0
            got[what] = max(got[what], size / MIB / seconds)
            cpu[what] = min(cpu[what], time.process_time() - c0)  # all threads' CPU
            shutil.rmtree(dest)
        ratio = got["export"] / got["copy"]
        hashing = _hash_cpu(repo, keys)
        bound = cpu["copy"] / (cpu["copy"] + hashing)
        print(
            f"EXPORT rep {rep + 1}: export {got['export']:.0f} MB/s, plain copy "
            f"{got['copy']:.0f} MB/s, ratio {ratio:.2f}; CPU {cpu['export']:.3f} s and "
            f"{cpu['copy']:.3f} s; hash alone {hashing:.3f} s (bound {bound:.2f})",
            flush=True,
        )
        records["zarrlake"].append(
            {
                "mb_s": got["export"],
                "ratio": ratio,
                "cpu_s": cpu["export"],
                "hash_cpu_s": hashing,
                "bound": bound,
            }
        )
        records["files"].append({"mb_s": got["copy"], "cpu_s": cpu["copy"]})
    return {"EXPORT": records}


def groups(cfg: dict[str, Any]) -> list[Group]:
    return [Group("EXPORT", ["zarrlake", "files"], run=run)]
