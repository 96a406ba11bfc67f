"""Injected faults (errors, lost responses) behind RetryingMetaStore must not change results."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator

import pytest

from zarrlake.errors import CASFailedError, InvalidInputError, TransientError
from zarrlake.metastore import MetaStore, open_metastore
from zarrlake.metastore.faults import FaultyMetaStore
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.retry import RetryPolicy

P = "part"
FAST = RetryPolicy(attempts=12, base_delay=0.0005, max_delay=0.005)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def inner(request: pytest.FixtureRequest, tmp_path) -> Iterator[MetaStore]:
    if request.param == "memory":
        url = f"memory://faults-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/meta.db"
    else:
        url = request.getfixturevalue("pg_metastore_url")
    meta = open_metastore(url)
    yield meta
    meta.close()


def test_cas_increments_survive_faults(inner: MetaStore):
    faulty = FaultyMetaStore(inner, seed=1, error_rate=0.05, lost_response_rate=0.05)
    store = RetryingMetaStore(faulty, FAST)
    done = conflicts = 0
    while done < 300:
        got = store.get(P, b"counter")
        count, version = (int(got[0]), got[1]) if got else (0, None)
        try:
            store.set_if(P, b"counter", str(count + 1).encode(), version)
        except CASFailedError:
            conflicts += 1  # would be a false conflict: nobody else writes this key
            continue
        done += 1
    assert int(inner.get(P, b"counter")[0]) == 300
    assert conflicts == 0
    assert faulty.errors_injected > 0 and faulty.responses_lost > 0


def test_set_and_set_many_with_faults_reach_the_intended_state(inner: MetaStore):
    faulty = FaultyMetaStore(inner, seed=2, error_rate=0.05, lost_response_rate=0.05)
    store = RetryingMetaStore(faulty, FAST)
    rng = random.Random(3)
    model: dict[bytes, bytes] = {}
    for i in range(300):
        op = rng.choice(["set", "set_many", "delete"])
        key = f"k{rng.randrange(40):02d}".encode()
        if op == "set":
            store.set(P, key, f"set{i}".encode())
            model[key] = f"set{i}".encode()
        elif op == "delete":
            store.delete(P, key)
            model.pop(key, None)
        else:
            batch = [
                (f"k{rng.randrange(40):02d}".encode(), None if rng.random() < 0.3 else b"m%d" % i)
                for _ in range(5)
            ]
            store.set_many(P, batch)
            for k, v in batch:
                if v is None:
                    model.pop(k, None)
                else:
                    model[k] = v
    assert {k: v for k, v, _ in inner.scan(P)} == model
    assert {k: v for k, v, _ in store.scan(P)} == model
    assert faulty.errors_injected > 0 and faulty.responses_lost > 0


def test_scan_restarts_after_the_last_key_yielded(inner: MetaStore):
    n = 1234
    inner.set_many(P, [(f"k{i:05d}".encode(), b"v") for i in range(n)])
    faulty = FaultyMetaStore(inner, seed=4, error_rate=0.3)
    store = RetryingMetaStore(faulty, RetryPolicy(attempts=30, base_delay=0.0001, max_delay=0.001))
    got = [k for k, _, _ in store.scan(P)]
    assert got == [f"k{i:05d}".encode() for i in range(n)]
    assert faulty.errors_injected > 1
    limited = [k for k, _, _ in store.scan(P, prefix=b"k00", limit=250)]
    assert limited == [f"k{i:05d}".encode() for i in range(250)]


def test_lost_cas_response_is_not_a_false_conflict(inner: MetaStore):
    faulty = FaultyMetaStore(inner, seed=5, lost_response_rate=1.0)
    store = RetryingMetaStore(faulty, FAST)
    created = store.set_if(P, b"k", b"v1", None)
    assert inner.get(P, b"k") == (b"v1", created)
    moved = store.set_if(P, b"k", b"v2", created)
    assert inner.get(P, b"k") == (b"v2", moved)
    assert faulty.responses_lost == 2


def test_failed_cas_stays_failed_when_its_response_is_lost(inner: MetaStore):
    current = inner.set(P, b"k", b"theirs")
    store = RetryingMetaStore(FaultyMetaStore(inner, seed=6, lost_response_rate=1.0), FAST)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"k", b"ours", current + 1000)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"k", b"ours", None)
    assert inner.get(P, b"k") == (b"theirs", current)


class _OverwrittenAfterLanding(MetaStore):
    """set_if lands, another writer overwrites it, then our response is lost."""

    def __init__(self, inner: MetaStore) -> None:
        self.inner, self.url = inner, inner.url

    def get(self, partition, key):
        return self.inner.get(partition, key)

    def scan(self, partition, start=b"", prefix=None, limit=None):
        return self.inner.scan(partition, start, prefix, limit)

    def set(self, partition, key, value):
        return self.inner.set(partition, key, value)

    def set_many(self, partition, items):
        self.inner.set_many(partition, items)

    def delete(self, partition, key):
        self.inner.delete(partition, key)

    def set_if(self, partition, key, value, expected):
        self.inner.set_if(partition, key, value, expected)
        self.inner.set(partition, key, b"someone else")
        raise TransientError("response lost")

    def drop_partition(self, partition):
        self.inner.drop_partition(partition)


def test_lost_response_then_overwritten_is_a_conflict(inner: MetaStore):
    version = inner.set(P, b"k", b"start")
    store = RetryingMetaStore(_OverwrittenAfterLanding(inner), FAST)
    with pytest.raises(CASFailedError):
        store.set_if(P, b"k", b"ours", version)
    assert inner.get(P, b"k")[0] == b"someone else"


def test_retrying_gives_up_after_the_policy_attempts():
    faulty = FaultyMetaStore(
        open_metastore(f"memory://faults-{uuid.uuid4().hex}"), seed=7, error_rate=1.0
    )
    store = RetryingMetaStore(faulty, RetryPolicy(attempts=3, base_delay=0.0001))
    with pytest.raises(TransientError, match="injected fault"):
        store.get(P, b"k")
    assert faulty.errors_injected == 3
    with pytest.raises(TransientError):
        store.set_if(P, b"k", b"v", None)
    assert faulty.errors_injected == 6
    with pytest.raises(TransientError):
        list(store.scan(P))
    assert faulty.errors_injected == 9


def test_faults_are_reproducible_from_the_seed():
    def run(seed: int) -> list[bool]:
        faulty = FaultyMetaStore(
            open_metastore(f"memory://faults-{uuid.uuid4().hex}"), seed=seed, error_rate=0.5
        )
        outcome = []
        for _ in range(40):
            try:
                faulty.get(P, b"k")
                outcome.append(True)
            except TransientError:
                outcome.append(False)
        return outcome

    assert run(11) == run(11)
    assert run(11) != run(12)
    assert 0 < sum(run(11)) < 40


def test_faulty_adds_latency():
    faulty = FaultyMetaStore(
        open_metastore(f"memory://faults-{uuid.uuid4().hex}"), seed=0, latency=0.01
    )
    began = time.monotonic()
    for _ in range(10):
        faulty.set(P, b"k", b"v")
        faulty.get(P, b"k")
    # 20 delays drawn uniformly from [0, 10 ms) with a fixed seed: about 100 ms in all
    assert time.monotonic() - began >= 0.03


@pytest.mark.parametrize(
    "kwargs", [{"error_rate": 1.5}, {"lost_response_rate": -0.1}, {"latency": -1.0}]
)
def test_faulty_rejects_bad_settings(kwargs):
    with pytest.raises(InvalidInputError):
        FaultyMetaStore(open_metastore("memory://faults-settings"), seed=0, **kwargs)
