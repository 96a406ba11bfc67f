"""The simulator's pull-request actors: seeds with a `pulls` actor among writers, mergers
and an admin hold every invariant and judge what they are about (guarded branch moves,
pull request records, merged pull requests); one seed in seven of the CI seeds draws one."""

from __future__ import annotations

from collections import Counter

from tests.simulator import Config, run
from tests.simulator import pulls as sim_pulls

SEEDS = range(12)


def test_seeds_with_pull_request_actors_hold_every_invariant():
    counts: Counter[str] = Counter()
    for seed in SEEDS:
        result = run(Config(seed, actors=("pulls", "writer", "merge", "admin"), ops=3))
        assert result.ok, result.failure
        counts.update(result.counts)
    for what in (
        "moves of a guarded branch checked",
        "pull request records checked",
        "merged pull requests checked",
    ):
        assert counts[what] > 0, (what, counts)


def test_one_seed_in_seven_draws_a_pull_request_actor():
    drawn = sum(bool(sim_pulls.drawn(seed)) for seed in range(5000))
    assert 600 < drawn < 830
    assert (
        run(Config(next(s for s in range(100) if sim_pulls.drawn(s))))
        .actors[-1]
        .startswith("pulls")
    )
