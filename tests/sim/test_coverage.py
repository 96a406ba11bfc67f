"""What the simulator covers besides the in-memory metastore and chunk writes: the
bucket-only metastore on the simulated object store (conditional writes, lost replies,
page sweeps judged by the service's clock), metadata documents checked at every commit,
and per-process clocks."""

from __future__ import annotations

from collections import Counter

from tests.simulator import Config, run
from tests.simulator.backends import DictObjectStore
from tests.simulator.planted import planted
from tests.simulator.world import BUCKET_EVERY

SEEDS = range(3, 3 + 12 * BUCKET_EVERY, BUCKET_EVERY)


def test_bucket_metastore_seeds_hold_every_invariant():
    faults: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for seed in SEEDS:
        result = run(Config(seed))
        assert result.ok, result.failure
        faults.update(result.faults)
        counts.update(result.counts)
    assert counts["seeds on the bucket metastore"] == len(SEEDS)
    assert counts["metastore heads' pages checked"] > 100
    assert faults["lost reply"] > 0 and faults["error before the call"] > 0


def test_the_simulated_store_has_conditional_writes_and_service_times():
    clock = [100.0]
    store = DictObjectStore("sim://t", clock=lambda: clock[0])
    tag = store.put_if("meta/p/head", b"one", None)
    clock[0] = 250.0
    store.put("meta/p/pages/x", b"page")
    assert store.get_tagged("meta/p/head") == (b"one", tag)
    assert dict(store.list_modified("meta/p/")) == {"meta/p/head": 100.0, "meta/p/pages/x": 250.0}


def test_a_metadata_conflict_ignored_on_rebase_fails_the_run_and_passes_without_the_bug():
    with planted("rebase_ignores_metadata_conflicts"):
        failing = next(r for r in (run(Config(s)) for s in range(400)) if not r.ok)
    assert "metadata conflict" in (failing.failure or "") or "structural" in (failing.failure or "")
    assert run(failing.config).ok


def test_each_process_has_its_own_clock():
    result = run(Config(2, metastore="memory"))
    assert result.ok, result.failure
    skewed = sum(run(Config(seed, metastore="memory")).faults["clock skew"] for seed in range(8))
    assert skewed > 0
