"""The simulator's lease check judges a committer by the seal it took itself. Seed 27214:
a commit seals, its branch-head read fails through clock jumps and it raises, its seal's
undo fails too; the same process then commits again, and the record still carries the
failed attempt's lapsed lease. That lease is recovery's to settle, not the new attempt's
(which has not sealed), so the check passes it by. The planted bug `lease_not_renewed`
(tests/sim/test_planted.py) still shows that a committer's own lapsed lease is caught."""

from __future__ import annotations

from tests.simulator import Config, run


def test_an_earlier_attempts_lapsed_lease_is_not_the_running_committers():
    result = run(Config(27214))
    assert result.ok, result.failure
    assert result.counts["committers' leases checked"] > 0
