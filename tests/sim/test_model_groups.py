"""The model's explanation of a branch moving to an existing commit (a reset or a
fast-forward): identical requests running at once may each make one such move, and no
request makes two."""

from __future__ import annotations

import pytest

from tests.simulator import Config, run
from tests.simulator.model import CommitInfo, Intent, Model, Outcome, Violation

OLD, NEW = "a" * 40, "b" * 40  # NEW's parent is OLD


def model(*intents: Intent) -> Model:
    """A model that knows OLD and NEW, main at NEW, and `intents` running."""
    m = Model(None, [])  # type: ignore[arg-type]  # _transition reads no store for these
    for cid, parents in ((OLD, ()), (NEW, (OLD,))):
        m.commits[cid] = CommitInfo(parents, {}, 0.0, frozenset(), frozenset(), None, "")
    m.heads["main"] = NEW
    for intent in intents:
        m.begin(intent)
    return m


def reset(n: int) -> Intent:
    return Intent(f"reset{n}", "reset", "main", f"admin{n}", target=OLD)


def fast_forward(n: int) -> Intent:
    return Intent(f"merge{n}", "merge", "main", f"merge{n}", source=NEW)


def test_two_resets_to_one_commit_may_each_move_the_branch_back_once():
    """Seed 2238 on the bucket (a false alarm of the model): two resets of main to one
    commit ran at once; one moved main back, a fast-forward moved it on, and the other's
    retry moved it back again. The first move was bound to both, so the second was called
    a phantom."""
    m = model(reset(0), reset(1), fast_forward(2), fast_forward(3))
    m._transition("main", NEW, OLD)  # one of the resets
    m._transition("main", OLD, NEW)  # a fast-forward
    m._transition("main", NEW, OLD)  # the other reset
    m._transition("main", OLD, NEW)  # the other fast-forward
    with pytest.raises(Violation, match=r"older commit .*\(a phantom\)"):
        m._transition("main", NEW, OLD)  # a third move back: two resets make two at most


def test_one_reset_moves_the_branch_back_once():
    m = model(reset(0), fast_forward(1))
    m._transition("main", NEW, OLD)
    m._transition("main", OLD, NEW)
    with pytest.raises(Violation, match=r"older commit .*\(a phantom\)"):
        m._transition("main", NEW, OLD)


def test_an_acknowledged_reset_leaves_the_other_its_own_move():
    """Once one of two resets that made one move is acknowledged, that move was its own:
    the other may still make one, and no more."""
    r0, r1 = reset(0), reset(1)
    m = model(r0, r1, fast_forward(2), fast_forward(3))
    m._transition("main", NEW, OLD)
    m.end(r0, Outcome.ACKED, OLD)
    m.settle()
    m._transition("main", OLD, NEW)
    m._transition("main", NEW, OLD)  # r1's own
    m._transition("main", OLD, NEW)
    with pytest.raises(Violation, match=r"older commit .*\(a phantom\)"):
        m._transition("main", NEW, OLD)


def test_seed_2238_on_the_bucket_holds_every_invariant():
    """The seed that found it (admin0 and admin1 resetting main to one commit, merge2
    fast-forwarding main between their moves)."""
    result = run(Config(2238, metastore="bucket"))
    assert result.ok, result.failure


def test_a_failed_reset_is_left_no_move_the_others_could_not_make():
    """Two resets made two moves back; when one then fails, one reset is left for two
    moves: the failed one must have made one (a failure that happened)."""
    r0, r1 = reset(0), reset(1)
    m = model(r0, r1, fast_forward(2))
    m._transition("main", NEW, OLD)
    m._transition("main", OLD, NEW)
    m._transition("main", NEW, OLD)
    m.end(r0, Outcome.FAILED, "refused")
    with pytest.raises(Violation, match=r"failed, yet moved .*\(a phantom\)"):
        m.settle()


def test_a_failed_reset_leaves_the_move_to_the_other():
    r0, r1 = reset(0), reset(1)
    m = model(r0, r1, fast_forward(2))
    m._transition("main", NEW, OLD)
    m.end(r0, Outcome.FAILED, "refused")
    m.settle()
    m._transition("main", OLD, NEW)
    with pytest.raises(Violation, match=r"older commit .*\(a phantom\)"):
        m._transition("main", NEW, OLD)  # r1 made the first move back
