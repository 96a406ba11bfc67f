"""Shrinking a failing run to one whose trace is short enough to read: fewer actors, fewer
operations each, fewer steps, no faults, keeping any variant that still fails the same way
(the same invariant, ids and numbers aside), on the run's seed or one of the next few (a
smaller cast schedules differently). Greedy and bounded: each variant is one run of a few
milliseconds."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from tests.simulator.world import Config, Result, run

MAX_RUNS = 400
SEEDS_PER_VARIANT = 5
"""A smaller cast schedules differently: each variant is tried on its seed and a few after."""


def signature(failure: str | None) -> str:
    """What kind of failure it is: its first words, with ids and numbers blanked."""
    if failure is None:
        return ""
    text = re.sub(r"[0-9a-f]{8,}", "#", failure.split("\n", 1)[0])
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'.'", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return " ".join(text.split()[:8])


def shrink(
    result: Result,
    runner: Callable[[Config], Result] = run,
    max_runs: int = MAX_RUNS,
    log: Callable[[str], None] = lambda line: None,
) -> Result:
    """The smallest failing variant of `result`'s run found within `max_runs` runs."""
    assert result.failure is not None, "only a failing run shrinks"
    want = signature(result.failure)
    best = result
    runs = 0

    def attempt(config: Config) -> bool:
        """Whether `config` (or it on one of a few other seeds) fails alike, smaller."""
        nonlocal best, runs
        for seed in range(config.seed, config.seed + SEEDS_PER_VARIANT):
            if runs >= max_runs:
                return False
            runs += 1
            variant = replace(config, seed=seed)
            got = runner(variant)
            alike = got.failure is not None and signature(got.failure) == want
            if alike and _size(got) < _size(best):
                best = got
                log(f"  shrunk to {variant.describe()}: {got.steps} steps")
                return True
        return False

    base = replace(best.config, actors=best.actors, ops=best.ops)
    attempt(base)
    changed = True
    while changed and runs < max_runs:
        changed = False
        config = best.config
        actors = config.actors or best.actors
        for i in range(len(actors)):  # one actor fewer
            fewer = actors[:i] + actors[i + 1 :]
            if fewer and attempt(replace(config, actors=fewer)):
                changed = True
                break
        if changed:
            continue
        ops = config.ops or best.ops
        for n in range(1, ops):  # fewer operations per actor
            if attempt(replace(config, ops=n)):
                changed = True
                break
        if changed:
            continue
        if config.faults and attempt(replace(config, faults=False)):
            changed = True
    return best


def _size(result: Result) -> tuple[int, int]:
    return (result.steps, len(result.actors) * result.ops)
