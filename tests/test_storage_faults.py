"""Fault injection (FaultyObjectStore) under RetryingObjectStore: transient errors and lost
responses are absorbed, and every operation ends in exactly the intended state."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from zarrlake.errors import InvalidInputError, NotFoundError, TransientError
from zarrlake.retry import RetryPolicy
from zarrlake.storage import ObjectStore, open_storage
from zarrlake.storage.faults import FaultyObjectStore
from zarrlake.storage.retrying import RetryingObjectStore

FAST = RetryPolicy(attempts=12, base_delay=0.0001, max_delay=0.002)
OPS = 500


@pytest.fixture(params=["memory", "local"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return open_storage(f"memory://faults-{uuid.uuid4().hex}", retry_policy=None)
    return open_storage(str(tmp_path / "objects"), retry_policy=None)


class Model:
    """Drives random puts / put_if_absents / deletes and remembers what must be stored."""

    def __init__(self, seed: int, keys: int = 40) -> None:
        self.rng = random.Random(seed)
        self.keys = [f"k/{i:02d}" for i in range(keys)]
        self.state: dict[str, bytes] = {}
        self.lost_creates = 0  # put_if_absent calls that wrote, lost the response, said True

    def steps(self, n: int) -> Iterator[tuple[str, str, bytes]]:
        for i in range(n):
            op = self.rng.choice(["put", "put_if_absent", "delete"])
            key = self.rng.choice(self.keys)
            yield op, key, f"op {i} {op} {key}".encode()  # unique bytes per operation

    def check(self, store: ObjectStore) -> None:
        assert sorted(store.list()) == sorted(self.state)
        for key, data in self.state.items():
            assert store.get(key) == data


def test_random_operations_end_in_intended_state(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=7, error_rate=0.05, lost_response_rate=0.05)
    store = RetryingObjectStore(faulty, FAST)
    model = Model(seed=11)
    for op, key, data in model.steps(OPS):
        if op == "put":
            store.put(key, data)
            model.state[key] = data
        elif op == "delete":
            store.delete(key)
            model.state.pop(key, None)
        else:
            lost_before = faulty.responses_lost
            created = store.put_if_absent(key, data)
            assert created is (key not in model.state), (key, created)
            if created:
                model.state[key] = data
                if faulty.responses_lost > lost_before:
                    model.lost_creates += 1
        # the store, read without faults, agrees after every single operation
        if key in model.state:
            assert inner.get(key) == model.state[key]
        else:
            assert not inner.exists(key)
    model.check(inner)
    assert faulty.errors_injected > 0
    assert faulty.responses_lost > 0
    # the lost-response case of put_if_absent happened and still reported True to its writer
    assert model.lost_creates > 0


async def test_random_operations_async(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=3, error_rate=0.05, lost_response_rate=0.05)
    store = RetryingObjectStore(faulty, FAST)
    model = Model(seed=5)
    for op, key, data in model.steps(OPS):
        if op == "put":
            await store.put_async(key, data)
            model.state[key] = data
        elif op == "delete":
            await store.delete_async(key)
            model.state.pop(key, None)
        else:
            lost_before = faulty.responses_lost
            created = await store.put_if_absent_async(key, data)
            assert created is (key not in model.state), (key, created)
            if created:
                model.state[key] = data
                model.lost_creates += faulty.responses_lost > lost_before
        if key in model.state:
            assert await store.get_async(key) == model.state[key]
        else:
            assert await store.exists_async(key) is False
    model.check(inner)
    assert faulty.errors_injected > 0
    assert faulty.responses_lost > 0
    assert model.lost_creates > 0


def test_concurrent_writers_under_faults(inner: ObjectStore) -> None:
    """Threads on disjoint keys plus a contended key: faults never change the outcome."""
    faulty = FaultyObjectStore(inner, seed=99, error_rate=0.05, lost_response_rate=0.05)
    store = RetryingObjectStore(faulty, FAST)
    threads, per_thread, contended = 8, 60, 20
    barrier = threading.Barrier(threads)

    def worker(t: int) -> list[bool]:
        wins = []
        for i in range(per_thread):
            store.put(f"t{t}/{i}", f"{t}:{i}".encode())
            if i % 3 == 0:
                store.delete(f"t{t}/{i}")
        for r in range(contended):
            barrier.wait(timeout=60)
            wins.append(store.put_if_absent(f"shared/{r}", f"thread {t}".encode()))
        return wins

    with ThreadPoolExecutor(threads) as pool:
        outcome = list(pool.map(worker, range(threads)))
    expected = {f"t{t}/{i}" for t in range(threads) for i in range(per_thread) if i % 3}
    assert set(inner.list("t")) == expected
    for r in range(contended):
        winners = [t for t in range(threads) if outcome[t][r]]
        assert len(winners) == 1, (r, winners)
        assert inner.get(f"shared/{r}") == f"thread {winners[0]}".encode()
    assert faulty.errors_injected > 0
    assert faulty.responses_lost > 0


# -- the wrappers' building blocks ----------------------------------------------------------


def test_injected_error_happens_before_the_operation(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=1, error_rate=1.0)
    with pytest.raises(TransientError, match="injected fault"):
        faulty.put("k", b"v")
    with pytest.raises(TransientError):
        faulty.put_if_absent("k", b"v")
    assert not inner.exists("k")
    inner.put("k", b"v")
    with pytest.raises(TransientError):
        faulty.delete("k")
    with pytest.raises(TransientError):
        faulty.get("k")
    with pytest.raises(TransientError):
        list(faulty.list())
    assert inner.get("k") == b"v"
    assert faulty.errors_injected == 5
    assert faulty.responses_lost == 0


def test_lost_response_happens_after_the_write(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=1, lost_response_rate=1.0)
    with pytest.raises(TransientError, match="response lost"):
        faulty.put("a", b"1")
    with pytest.raises(TransientError, match="response lost"):
        faulty.put_if_absent("b", b"2")
    assert inner.get("a") == b"1" and inner.get("b") == b"2"
    with pytest.raises(TransientError, match="response lost"):
        faulty.delete("a")
    assert not inner.exists("a")
    assert faulty.get("b") == b"2"  # reads have no response to lose
    assert faulty.responses_lost == 3
    assert faulty.errors_injected == 0


async def test_faults_async(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=1, lost_response_rate=1.0, latency=0.001)
    with pytest.raises(TransientError, match="response lost"):
        await faulty.put_if_absent_async("b", b"2")
    assert await faulty.get_async("b") == b"2"
    faulty.error_rate = 1.0
    with pytest.raises(TransientError, match="injected fault"):
        await faulty.exists_async("b")
    assert (faulty.errors_injected, faulty.responses_lost) == (1, 1)


def test_same_seed_same_faults(inner: ObjectStore) -> None:
    def run(seed: int) -> list[bool]:
        faulty = FaultyObjectStore(inner, seed=seed, error_rate=0.3)
        outcome = []
        for i in range(100):
            try:
                faulty.put(f"s/{i}", b"")
                outcome.append(True)
            except TransientError:
                outcome.append(False)
        return outcome

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_retry_gives_up_after_policy_attempts(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=1, error_rate=1.0)
    store = RetryingObjectStore(faulty, RetryPolicy(attempts=3, base_delay=0.0001))
    with pytest.raises(TransientError):
        store.put("k", b"v")
    assert faulty.errors_injected == 3
    assert not inner.exists("k")


def test_retry_does_not_retry_permanent_errors(inner: ObjectStore) -> None:
    faulty = FaultyObjectStore(inner, seed=1)
    store = RetryingObjectStore(faulty, FAST)
    with pytest.raises(NotFoundError, match="missing"):
        store.get("missing")
    with pytest.raises(InvalidInputError):
        store.put("/bad", b"")


class _OtherWriterWins(ObjectStore):
    """First put_if_absent: another writer's bytes land, then our request fails transiently."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.url, self.calls = inner, inner.url, 0

    def get(self, key, byte_range=None):  # type: ignore[no-untyped-def]
        return self.inner.get(key, byte_range)

    def put(self, key, data):  # type: ignore[no-untyped-def]
        self.inner.put(key, data)

    def put_if_absent(self, key, data):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            self.inner.put(key, b"someone else")
            raise TransientError("timeout")
        return self.inner.put_if_absent(key, data)

    def delete(self, key):  # type: ignore[no-untyped-def]
        self.inner.delete(key)

    def list(self, prefix=""):  # type: ignore[no-untyped-def]
        return self.inner.list(prefix)


def test_put_if_absent_retry_not_fooled_by_another_writer(inner: ObjectStore) -> None:
    """After a transient failure, "exists" is only taken as ours if the bytes are ours."""
    shim = _OtherWriterWins(inner)
    store = RetryingObjectStore(shim, FAST)
    assert store.put_if_absent("k", b"mine") is False
    assert shim.calls == 2
    assert inner.get("k") == b"someone else"


@pytest.mark.parametrize(
    "kwargs", [{"error_rate": 1.5}, {"lost_response_rate": -0.1}, {"latency": -1.0}]
)
def test_fault_parameters_validated(inner: ObjectStore, kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidInputError):
        FaultyObjectStore(inner, seed=0, **kwargs)
