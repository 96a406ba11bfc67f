"""Web UI page times (issue 16): every page of `zarrlake ui`, requested in process through
starlette's TestClient against `zarrlake.ui.create_app(repo)`, on two repositories:

  demo  a demo-sized repository: a 3-D (time, lat, lon) and a 2-D array, a dozen commits on
        main, a branch with its own commit, a tag (like `zarrlake demo --small`, without
        Spark, so that it builds in seconds);
  big   W7's repository: one array of N 1 KiB chunks in one commit (built by W7's builder,
        benchmarks/workloads.py, in a worker process), then a one-chunk commit on top.

For each page: `cold` is the first request of that page on a freshly opened repository and a
new app (so it includes compiling the page's template; median over --reps such), `warm` the
median of --requests further requests (the app caches previews, so a warm preview is a
cache hit).

    python -m benchmarks.ui_pages [--chunks 200000] [--reps 3] [--requests 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr

import zarrlake as zl

Page = tuple[str, str, dict[str, str]]  # name, URL path, query


def field(t: int, rows: int, cols: int, phase: float) -> np.ndarray:
    y, x = np.mgrid[0:rows, 0:cols].astype("f4")
    base = 270 + 10 * np.sin(np.pi * y / rows + phase) * np.cos(np.pi * x / cols)
    return np.broadcast_to(base, (t, rows, cols)).astype("f4")


def build_demo(path: Path, days: int = 10) -> tuple[zl.Repo, list[Page]]:
    repo = zl.Repo.create(path)
    s = repo.create_session("main", author="bench")
    root = zarr.open_group(s.store)
    weather = root.create_group("weather", attributes={"source": "bench"})
    weather.create_array(
        "t2m",
        shape=(24 * days, 90, 180),
        chunks=(24, 45, 45),
        dtype="f4",
        fill_value=float("nan"),
        dimension_names=("time", "lat", "lon"),
        attributes={"units": "K"},
    )
    elev = root.create_array("elevation", shape=(360, 720), chunks=(90, 90), dtype="f4")
    elev[:] = field(1, 360, 720, 0.0)[0]
    first = s.commit("Create the layout")
    repo.create_tag("v1", at=first)
    for day in range(days):
        s = repo.create_session("main", author="bench")
        a = zarr.open_array(s.store, path="weather/t2m")
        a[24 * day : 24 * (day + 1)] = field(24, 90, 180, day / 3)
        last = s.commit(f"Day {day + 1}")
        if day == days // 2:
            repo.create_branch("dev", at=last)
    s = repo.create_session("dev", author="bench")
    zarr.open_array(s.store, path="elevation")[0:90, 0:180] = 0.5
    s.commit("Experiment on dev")
    pages: list[Page] = [
        ("home", "/", {}),
        ("log", "/log", {"ref": "main"}),
        ("commit", f"/commit/{last}", {}),
        ("tree", "/tree", {"ref": "main"}),
        ("array 3-D", "/array", {"ref": "main", "path": "weather/t2m"}),
        ("preview 3-D", "/preview.png", {"ref": "main", "path": "weather/t2m"}),
        ("array 2-D", "/array", {"ref": "main", "path": "elevation"}),
        ("preview 2-D", "/preview.png", {"ref": "main", "path": "elevation"}),
    ]
    return repo, pages


def build_big(path: Path, n: int) -> tuple[zl.Repo, list[Page]]:
    from benchmarks.arrays import ARRAY
    from benchmarks.procs import run_worker

    # In worker processes, as `make bench` runs W7: each exits only when its commit's
    # background cleanup (dropping the staged records) is done, so none runs while timing.
    run_worker("W7", "zarrlake", str(path), {"w7_chunks": n})
    run_worker("W7commit", "zarrlake", str(path), {"index": n // 2})
    repo = zl.Repo.open(path)
    head, big = [c.id for c in repo.log("main")][:2]
    pages: list[Page] = [
        ("home", "/", {}),
        ("log", "/log", {"ref": "main"}),
        (f"commit of {n:,} chunks", f"/commit/{big}", {}),
        ("commit of 1 chunk", f"/commit/{head}", {}),
        ("tree", "/tree", {"ref": "main"}),
        ("array", "/array", {"ref": "main", "path": ARRAY}),
        ("preview", "/preview.png", {"ref": "main", "path": ARRAY}),
    ]
    return repo, pages


def time_pages(path: Path, pages: list[Page], reps: int, requests: int) -> dict[str, dict]:
    from starlette.testclient import TestClient

    from zarrlake.ui import create_app

    cold: dict[str, list[float]] = {name: [] for name, _, _ in pages}
    warm: dict[str, list[float]] = {name: [] for name, _, _ in pages}
    sizes: dict[str, int] = {}

    def get(client: TestClient, url: str, query: dict[str, str]) -> tuple[float, int]:
        t0 = time.perf_counter()
        r = client.get(url, params=query)
        ms = (time.perf_counter() - t0) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"GET {url} {query}: {r.status_code} {r.text[:300]}")
        return ms, len(r.content)

    for _ in range(reps):
        for name, url, query in pages:  # cold: a new repository handle and app per page
            repo = zl.Repo.open(path)
            with TestClient(create_app(repo)) as client:
                client.get("/colorbar.png")  # starts the client's event loop thread
                ms, sizes[name] = get(client, url, query)
                cold[name].append(ms)
                warm[name] += [get(client, url, query)[0] for _ in range(requests)]
            repo.close()
    return {
        name: {
            "cold_ms": statistics.median(cold[name]),
            "warm_ms": statistics.median(warm[name]),
            "bytes": sizes[name],
        }
        for name, _, _ in pages
    }


def table(title: str, rows: dict[str, dict]) -> str:
    lines = [
        f"#### {title}",
        "",
        "| Page | cold (ms) | warm (ms) | response (KiB) |",
        "|---|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['cold_ms']:.1f} | {r['warm_ms']:.1f} | {r['bytes'] / 1024:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=200_000, help="chunks of the big array")
    ap.add_argument("--reps", type=int, default=3, help="cold requests per page")
    ap.add_argument("--requests", type=int, default=5, help="warm requests per cold one")
    ap.add_argument("--only", choices=["demo", "big"], help="one repository only")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    builders: dict[str, Callable[[Path], tuple[zl.Repo, list[Page]]]] = {
        "demo": build_demo,
        "big": lambda p: build_big(p, args.chunks),
    }
    out: dict[str, object] = {"load_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="zl-ui-bench-") as tmp:
        for name, builder in builders.items():
            if args.only and name != args.only:
                continue
            t0 = time.perf_counter()
            repo, pages = builder(Path(tmp) / name)
            repo.close()
            build_s = time.perf_counter() - t0
            rows = time_pages(Path(tmp) / name, pages, args.reps, args.requests)
            out[name] = {"build_s": round(build_s, 1), "pages": rows}
            title = "demo-sized repository" if name == "demo" else f"{args.chunks:,}-chunk array"
            print(table(f"{title} (built in {build_s:.1f}s)", rows), flush=True)
            print(flush=True)
    out["load_at_end"] = os.getloadavg()
    print(f"load average: start {out['load_at_start']}, end {out['load_at_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
