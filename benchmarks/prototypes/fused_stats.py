"""A measured proposal, not part of zarrlake: a large float32 chunk's statistics in one
compiled pass (`fused_stats.c`, AVX2, built here with the system's C compiler and loaded
with ctypes, which releases the GIL once for the whole call) against numpy's passes
(`statistics.of_chunk`: a minimum, a maximum and a float64 `einsum`, each releasing and
taking back the GIL). Nothing in the package imports it; whether zarrlake may ship such a
compiled helper is the team's question (issue 51, docs/performance.md, "Chunk statistics").

    python -m benchmarks.prototypes.fused_stats           # thread CPU a chunk, hot and cold
    python -m benchmarks.prototypes.fused_stats --ingest 6  # W1's ingest: off / numpy / fused

The ingest mode writes W1's 256 x 1 MiB array on /dev/shm in one process, statistics off,
numpy's and the fused pass's alternating, and prints the process CPU of each (median)."""

from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
_D, _I = ctypes.c_double, ctypes.c_int64


def build() -> Callable[[np.ndarray, float], tuple[float, float, float, int, int]]:
    """The fused pass, compiled into a temporary directory: values -> (min, max, sum, NaN
    count, fill count)."""
    out = Path(tempfile.mkdtemp()) / "libfused_stats.so"
    subprocess.run(
        ["cc", "-O3", "-mavx2", "-shared", "-fPIC", "-o", str(out), str(HERE / "fused_stats.c")],
        check=True,
    )
    fn = ctypes.CDLL(str(out)).f32_stats
    fn.argtypes = [ctypes.c_void_p, _I, ctypes.c_float, ctypes.c_int] + [ctypes.c_void_p] * 5
    cells = [_D(), _D(), _D(), _I(), _I()]
    refs = [ctypes.addressof(c) for c in cells]

    def stats(v: np.ndarray, fill: float) -> tuple[float, float, float, int, int]:
        fn(v.ctypes.data, v.size, fill, int(fill != fill), *refs)
        return tuple(c.value for c in cells)  # type: ignore[return-value]

    return stats


def _cpu_per_call(
    fn: Callable[[np.ndarray], Any], pick: Callable[[int], np.ndarray], n: int
) -> float:
    best = []
    for _ in range(5):
        t0 = time.thread_time()
        for i in range(n):
            fn(pick(i))
        best.append((time.thread_time() - t0) / n * 1e6)
    return min(best)


def micro() -> None:
    """Thread CPU a chunk (1 MiB of float32, in cache and out of it: 256 MiB of chunks)."""
    from zarrlake.vc.statistics import of_chunk

    fused = build()
    rng = np.random.default_rng(1)
    hot = rng.random(262_144, dtype=np.float32)
    cold = rng.random((256, 262_144), dtype=np.float32)
    for name, fn in (
        ("numpy (of_chunk)", lambda v: of_chunk(v, 0.0)),
        ("fused", lambda v: fused(v, 0.0)),
    ):
        h = _cpu_per_call(fn, lambda i: hot, 200)
        c = _cpu_per_call(fn, lambda i: cold[i % 256], 256)
        print(f"{name:18s} in cache {h:6.1f} us   out of it {c:6.1f} us")


def ingest(reps: int) -> None:
    """W1's ingest on /dev/shm, statistics off, numpy's and fused, alternating."""
    import zarrlake.zarr_store.pipeline as pipeline
    from benchmarks.statistics import _ingest, _timed_ingest
    from zarrlake.format import statistics as sf
    from zarrlake.vc.statistics import as_stats

    fused = build()
    numpy_stats = pipeline.of_chunk
    pack, unpack = struct.Struct("<2d"), struct.Struct("<2Q")

    def fused_stats(values: np.ndarray, fill: Any) -> Any:
        v = values.ravel()
        if v.dtype != np.float32 or not v.flags.c_contiguous or fill is None:
            return numpy_stats(values, fill)
        lo, hi, total, nan, fills = fused(v, float(fill))
        low, high = unpack.unpack(pack.pack(lo, hi))
        return as_stats((sf.FLOAT, v.size, nan, fills, low, high, total))

    base = Path("/dev/shm/zarrlake-fused-stats")
    shutil.rmtree(base, ignore_errors=True)
    for on in (True, False):
        _ingest(str(base / f"warm-{on}"), on, (2, 512, 512))
    modes = ["off", "numpy", "fused"]
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(reps):
        for m in modes[r % 3 :] + modes[: r % 3]:
            pipeline.of_chunk = fused_stats if m == "fused" else numpy_stats  # type: ignore[assignment]
            cpu[m].append(_timed_ingest(str(base / f"{m}-{r}"), m != "off", (256, 512, 512))[1])
    shutil.rmtree(base, ignore_errors=True)
    off = statistics.median(cpu["off"])
    for m in modes:
        c = statistics.median(cpu[m])
        pct, per_chunk = 100 * (c / off - 1), 1e6 * (c - off) / 256
        print(f"{m:6s} CPU {c:.3f} s ({pct:+.1f}%, {per_chunk:.0f} us a chunk)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ingest", type=int, metavar="REPS", help="W1's ingest, REPS rounds")
    args = ap.parse_args()
    ingest(args.ingest) if args.ingest else micro()
