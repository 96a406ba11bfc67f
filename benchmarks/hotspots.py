"""Profile one benchmark worker with py-spy (all threads, idle time excluded) and print its
hot spots: functions by inclusive and by self share of the samples.

    python -m benchmarks.hotspots W2 zarrlake            # full sizes
    python -m benchmarks.hotspots W7commit zarrlake --quick --top 30

Workers that read what another wrote (W3, W4 read W1's array; W7commit reads W7's) get
that predecessor run first, unprofiled. py-spy is installed in the benchmark venv (`make bench`).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.procs import child_env, command, parse_result, run_worker
from benchmarks.run import FULL, QUICK

PREDECESSOR = {"W3": "W1", "W4": "W1", "W7commit": "W7"}
UNTIMED = (
    "_find_and_load (",  # imports
    "generate (",  # test data
    "chunk_value (",
    "array_equal (",  # checks after the clock stops
    "_readers (",  # W5's reader processes time themselves
    "run_worker (",
    "_check (",
)
IDLE_LEAVES = (
    "_worker (concurrent/futures/thread.py",  # pool threads waiting for work
    "Condition.wait (",
    "select (selectors.py",
    "EpollSelector.select (",
    "Event.wait (",
    "Thread.join (",
)


def hot_spots(raw: str, top: int) -> str:
    """Tables of inclusive and self shares from py-spy's collapsed-stack output."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f for f in stack.split(";") if not f.startswith(("thread ", "process "))]
        if not frames or any(u in f for f in frames for u in UNTIMED):
            continue
        if frames[-1].startswith(IDLE_LEAVES):
            continue
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    if not total:
        return "no samples"
    out = [
        f"{total} samples (all threads; imports, data generation, checks and idle waits left out)",
        "",
        "inclusive  self  function (file:line)",
    ]
    for frame, n in inclusive.most_common(top):
        out.append(f"{100 * n / total:8.1f}% {100 * own[frame] / total:5.1f}%  {frame}")
    out += ["", "top by self time:"]
    for frame, n in own.most_common(top):
        out.append(f"{100 * inclusive[frame] / total:8.1f}% {100 * n / total:5.1f}%  {frame}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("engine")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--rate", type=int, default=250, help="samples per second")
    ap.add_argument("--index", type=int, help="row to commit/read (W4, W7commit)")
    ap.add_argument("--lines", action="store_true", help="by current line, not by function")
    ap.add_argument("--after", help="predecessor worker to run first (default: by workload)")
    ap.add_argument("--repo", help="work on this repository path; kept; built if missing")
    ap.add_argument("--keep", help="also save the collapsed stacks to this file")
    args = ap.parse_args()
    params = dict(QUICK if args.quick else FULL)
    if args.index is not None:
        params["index"] = args.index
    elif args.workload == "W7commit":
        params["index"] = params["w7_chunks"] // 2
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    work = Path(tempfile.mkdtemp(prefix="zarrlake-profile-"))
    try:
        path = args.repo or str(work / "repo")
        before = args.after or PREDECESSOR.get(args.workload)
        if before and not (args.repo and Path(args.repo).exists()):
            run_worker(before, args.engine, path, params)
        stacks = work / "stacks.txt"
        worker = command(args.workload, args.engine, path, params)
        spy = [pyspy, "record", "-r", str(args.rate), "-f", "raw", "-o", str(stacks)]
        if not args.lines:
            spy.append("-F")  # aggregate by function (its first line)
        proc = subprocess.run(
            [*spy, "--", *worker],
            capture_output=True,
            text=True,
            env=child_env(),
        )
        result = parse_result(proc.stdout)
        if proc.returncode != 0 or result is None:
            sys.exit(f"profiling failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        raw = stacks.read_text()
        if args.keep:
            Path(args.keep).write_text(raw)
        print(f"{args.workload} {args.engine}: {result}\n")
        print(hot_spots(raw, args.top))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
