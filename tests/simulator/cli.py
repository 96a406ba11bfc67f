"""The simulator's command line: `python -m tests.simulator COMMAND`.

    run --seeds 0:5000 [--jobs 2]     many seeds; a summary, and a replay command per failure
                                      (--actors gc,gc,writer: every seed with these actors)
    replay SEED [--shrink] [--calls]  one seed, with its trace (shrunk first with --shrink)
    soak --steps 1000000 [--jobs 2]   seeds until that many steps; figures for docs/reliability.md

`--metastore memory|bucket` runs every seed on that metastore (by default one seed in four
runs on the bucket-only one). `--bug NAME` plants one of `tests.simulator.planted`'s bugs
for the run; `--issues` provokes
known library issues the default runs steer clear of (`world.KNOWN_ISSUES`). Every failure
prints the command that replays it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field

from tests.simulator.planted import BUGS, UNCAUGHT, planted
from tests.simulator.shrink import shrink
from tests.simulator.trace import Trace
from tests.simulator.world import (
    BUCKET_EVERY,
    KINDS,
    KNOWN_ISSUES,
    METASTORES,
    Config,
    Result,
    run,
)


@dataclass
class Summary:
    """What a batch of seeds did."""

    seeds: int = 0
    steps: int = 0
    commits: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    checks: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[Config, str]] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: Result) -> None:
        """Count one seed's result in the totals."""
        self.seeds += 1
        self.steps += result.steps
        self.commits += result.commits
        self.faults.update(result.faults)
        self.checks.update(result.counts)
        self.checks["steps checked"] += result.steps
        if result.failure is not None:
            self.failures.append((result.config, result.failure))

    def merge(self, other: Summary) -> None:
        """Add the totals of another batch (from a worker process)."""
        self.seeds += other.seeds
        self.steps += other.steps
        self.commits += other.commits
        self.faults.update(other.faults)
        self.checks.update(other.checks)
        self.failures += other.failures

    def lines(self) -> list[str]:
        """The summary as printed: totals, faults injected, checks made, failures."""
        out = [
            f"seeds: {self.seeds:,}   steps: {self.steps:,}   commits verified: "
            f"{self.commits:,}   failures: {len(self.failures)}   seconds: {self.seconds:.1f}",
            "faults injected:",
        ]
        out += [f"  {n:>12,}  {kind}" for kind, n in sorted(self.faults.items())]
        out.append(f"  {sum(self.faults.values()):>12,}  in all")
        out.append("invariants checked:")
        out += [f"  {n:>12,}  {kind}" for kind, n in sorted(self.checks.items())]
        return out


def _plant(bug: str | None):
    return planted(bug) if bug else nullcontext()


def _batch(args: tuple[list[int], Config, str | None, int | None, bool]) -> Summary:
    seeds, template, bug, max_total_steps, stop = args
    summary = Summary()
    start = time.perf_counter()
    with _plant(bug):
        for seed in seeds:
            result = run(Config(**{**template.__dict__, "seed": seed}))
            summary.add(result)
            if result.failure is not None and stop:
                break
            if max_total_steps is not None and summary.steps >= max_total_steps:
                break
    summary.seconds = time.perf_counter() - start
    return summary


def run_many(
    seeds: range,
    template: Config,
    bug: str | None = None,
    jobs: int = 1,
    stop: bool = False,
    max_total_steps: int | None = None,
) -> Summary:
    """Run `seeds` (split over `jobs` processes); stop at the first failure if `stop`."""
    start = time.perf_counter()
    seeds_list = list(seeds)
    total = Summary()
    if jobs <= 1:
        total = _batch((seeds_list, template, bug, max_total_steps, stop))
    else:
        parts = [seeds_list[i::jobs] for i in range(jobs)]
        share = None if max_total_steps is None else -(-max_total_steps // jobs)
        with ProcessPoolExecutor(jobs) as pool:
            for part in pool.map(_batch, [(p, template, bug, share, stop) for p in parts]):
                total.merge(part)
    total.seconds = time.perf_counter() - start
    total.failures.sort(key=lambda f: f[0].seed)
    return total


def replay_command(config: Config, bug: str | None) -> str:
    """The command line that replays `config` (with the planted `bug`, if any)."""
    parts = ["python -m tests.simulator replay", str(config.seed)]
    if config.actors is not None:
        parts.append(f"--actors {','.join(config.actors)}")
    if config.ops is not None:
        parts.append(f"--ops {config.ops}")
    if config.max_steps != Config.max_steps:
        parts.append(f"--max-steps {config.max_steps}")
    if not config.faults:
        parts.append("--no-faults")
    if config.issues:
        parts.append(f"--issues {','.join(sorted(config.issues))}")
    if config.metastore is not None:
        parts.append(f"--metastore {config.metastore}")
    if config.wild_clocks:
        parts.append("--wild-clocks")
    if config.stuck_reads:
        parts.append("--stuck-reads")
    if bug:
        parts.append(f"--bug {bug}")
    return " ".join(parts)


def _config(args: argparse.Namespace, seed: int = 0) -> Config:
    actors = tuple(args.actors.split(",")) if getattr(args, "actors", None) else None
    for name in actors or ():
        if name.rstrip("0123456789") not in KINDS:
            raise SystemExit(f"unknown actor {name!r}; known: {', '.join(KINDS)}")
    issues = frozenset(args.issues.split(",")) if args.issues else frozenset()
    return Config(
        seed,
        actors=actors,
        ops=getattr(args, "ops", None),
        max_steps=args.max_steps,
        faults=not args.no_faults,
        issues=issues,
        metastore=args.metastore,
        wild_clocks=args.wild_clocks,
        stuck_reads=args.stuck_reads,
    )


def _seeds(text: str) -> range:
    a, _, b = text.partition(":")
    return range(int(a), int(b)) if b else range(int(a), int(a) + 1)


def main(argv: list[str] | None = None) -> int:
    """The `python -m tests.simulator` command: run, replay, shrink or soak seeds; returns the
    exit code."""
    parser = argparse.ArgumentParser(prog="python -m tests.simulator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "replay", "soak"):
        p = sub.add_parser(name)
        p.add_argument("--bug", choices=sorted(BUGS | UNCAUGHT), help="plant this bug")
        p.add_argument("--issues", help=f"provoke known issues: {', '.join(KNOWN_ISSUES)}")
        p.add_argument("--max-steps", type=int, default=Config.max_steps)
        p.add_argument("--no-faults", action="store_true")
        p.add_argument(
            "--stuck-reads",
            action="store_true",
            help="in flaky seeds, reads may fail for several tries in a row",
        )
        p.add_argument(
            "--wild-clocks",
            action="store_true",
            help="skews of up to 80 minutes, one-process clock steps of any size",
        )
        p.add_argument(
            "--metastore",
            choices=sorted(METASTORES),
            help=f"run on this metastore (default: the bucket one every {BUCKET_EVERY}th seed)",
        )
        p.add_argument("--actors", help=f"comma-separated, of {', '.join(KINDS)}")
        if name == "replay":
            p.add_argument("seed", type=int)
            p.add_argument("--ops", type=int, help="operations per actor")
            p.add_argument("--calls", action="store_true", help="trace every backend call")
            p.add_argument("--shrink", action="store_true", help="shrink a failure first")
        else:
            p.add_argument("--jobs", type=int, default=1)
        if name == "run":
            p.add_argument("--seeds", default="0:5000", help="A:B (B excluded) or one seed")
            p.add_argument("--stop", action="store_true", help="stop at the first failure")
        if name == "soak":
            p.add_argument("--steps", type=int, default=1_000_000)
            p.add_argument("--start", type=int, default=1_000_000, help="first seed")
    args = parser.parse_args(argv)

    if args.command == "replay":
        return _replay(args)
    if args.command == "run":
        summary = run_many(_seeds(args.seeds), _config(args), args.bug, args.jobs, args.stop)
    else:
        seeds = range(args.start, args.start + 10 * args.steps)
        summary = run_many(seeds, _config(args), args.bug, args.jobs, False, args.steps)
    for line in summary.lines():
        print(line)
    for config, failure in summary.failures[:20]:
        print(f"FAILED {config.describe()}: {failure.splitlines()[0]}")
        print(f"  replay: {replay_command(config, args.bug)} --shrink")
    return 1 if summary.failures else 0


def _replay(args: argparse.Namespace) -> int:
    config = _config(args, args.seed)
    with _plant(args.bug):
        result = run(config, trace=Trace(keep_all=True, calls=args.calls))
        if result.failure is not None and args.shrink:
            print(f"shrinking {config.describe()} ({result.steps} steps)...", file=sys.stderr)
            small = shrink(result, log=lambda line: print(line, file=sys.stderr))
            config = small.config
            result = run(config, trace=Trace(keep_all=True, calls=args.calls))
    print(result.trace)
    print(
        f"\n{config.describe()}: actors {','.join(result.actors)}, {result.ops} operations "
        f"each, {result.steps} steps, faults {dict(result.faults) or 'none'}"
    )
    if result.failure is None:
        print("passed")
        return 0
    print(result.failure)
    print(f"replay: {replay_command(config, args.bug)}")
    return 1
