"""Conformance under faults: behind RetryingObjectStore, injected transient errors and lost
responses on the backend are absorbed, and every operation ends in exactly the intended
state. Mix into an ObjectStoreTests subclass."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from zarrlake._util.retry import RetryPolicy
from zarrlake.errors import InvalidInputError, NotFoundError, TransientError
from zarrlake.storage import ObjectStore, WrapperObjectStore
from zarrlake.storage.retrying import RetryingObjectStore
from zarrlake.testing.faults import FaultyObjectStore

FAST = RetryPolicy(attempts=12, base_delay=0.0001, max_delay=0.002)
OPS = 500


class Model:
    """Drives random puts / put_if_absents / deletes and remembers what must be stored."""

    def __init__(self, seed: int, keys: int = 40) -> None:
        self.rng = random.Random(seed)
        self.keys = [f"k/{i:02d}" for i in range(keys)]
        self.state: dict[str, bytes] = {}
        self.lost_creates = 0  # put_if_absent calls that wrote, lost the response, said True

    def steps(self, n: int) -> Iterator[tuple[str, str, bytes]]:
        """`n` random operations (put, put_if_absent, delete) with unique bytes each."""
        for i in range(n):
            op = self.rng.choice(["put", "put_if_absent", "delete"])
            key = self.rng.choice(self.keys)
            yield op, key, f"op {i} {op} {key}".encode()  # unique bytes per operation

    def check(self, store: ObjectStore) -> None:
        """Assert that `store` holds exactly the modelled objects."""
        assert sorted(store.list()) == sorted(self.state)
        for key, data in self.state.items():
            assert store.get(key) == data


class OtherWriterWins(WrapperObjectStore):
    """First put_if_absent: another writer's bytes land, then our request fails transiently."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.calls = 0

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Let another writer create the key, time out once, then pass calls on."""
        self.calls += 1
        if self.calls == 1:
            self.inner.put(key, b"someone else")
            raise TransientError("timeout")
        return self.inner.put_if_absent(key, data)


class RetriedObjectStoreTests:
    """Needs a `store` fixture (ObjectStoreTests has it)."""

    def test_random_operations_end_in_intended_state(self, store: ObjectStore) -> None:
        """Random operations through retries under faults end in the modelled state."""
        faulty = FaultyObjectStore(store, seed=7, error_rate=0.05, lost_response_rate=0.05)
        retried = RetryingObjectStore(faulty, FAST)
        model = Model(seed=11)
        for op, key, data in model.steps(OPS):
            if op == "put":
                retried.put(key, data)
                model.state[key] = data
            elif op == "delete":
                retried.delete(key)
                model.state.pop(key, None)
            else:
                lost_before = faulty.responses_lost
                created = retried.put_if_absent(key, data)
                assert created is (key not in model.state), (key, created)
                if created:
                    model.state[key] = data
                    if faulty.responses_lost > lost_before:
                        model.lost_creates += 1
            # the store, read without faults, agrees after every single operation
            if key in model.state:
                assert store.get(key) == model.state[key]
            else:
                assert not store.exists(key)
        model.check(store)
        assert faulty.errors_injected > 0
        assert faulty.responses_lost > 0
        # the lost-response case of put_if_absent happened and still reported True to its writer
        assert model.lost_creates > 0

    def test_concurrent_writers_under_faults(self, store: ObjectStore) -> None:
        """Threads on disjoint keys plus a contended key: faults never change the outcome."""
        faulty = FaultyObjectStore(store, seed=99, error_rate=0.05, lost_response_rate=0.05)
        retried = RetryingObjectStore(faulty, FAST)
        threads, per_thread, contended = 8, 60, 20
        barrier = threading.Barrier(threads)

        def worker(t: int) -> list[bool]:
            wins = []
            for i in range(per_thread):
                retried.put(f"t{t}/{i}", f"{t}:{i}".encode())
                if i % 3 == 0:
                    retried.delete(f"t{t}/{i}")
            for r in range(contended):
                barrier.wait(timeout=60)
                wins.append(retried.put_if_absent(f"shared/{r}", f"thread {t}".encode()))
            return wins

        with ThreadPoolExecutor(threads) as pool:
            outcome = list(pool.map(worker, range(threads)))
        expected = {f"t{t}/{i}" for t in range(threads) for i in range(per_thread) if i % 3}
        assert set(store.list("t")) == expected
        for r in range(contended):
            winners = [t for t in range(threads) if outcome[t][r]]
            assert len(winners) == 1, (r, winners)
            assert store.get(f"shared/{r}") == f"thread {winners[0]}".encode()
        assert faulty.errors_injected > 0
        assert faulty.responses_lost > 0

    def test_injected_error_happens_before_the_operation(self, store: ObjectStore) -> None:
        """An injected error leaves the store untouched."""
        faulty = FaultyObjectStore(store, seed=1, error_rate=1.0)
        with pytest.raises(TransientError, match="injected fault"):
            faulty.put("k", b"v")
        with pytest.raises(TransientError):
            faulty.put_if_absent("k", b"v")
        assert not store.exists("k")
        store.put("k", b"v")
        with pytest.raises(TransientError):
            faulty.delete("k")
        with pytest.raises(TransientError):
            faulty.get("k")
        with pytest.raises(TransientError):
            list(faulty.list())
        assert store.get("k") == b"v"
        assert faulty.errors_injected == 5
        assert faulty.responses_lost == 0

    def test_lost_response_happens_after_the_write(self, store: ObjectStore) -> None:
        """A lost response comes after the operation took effect."""
        faulty = FaultyObjectStore(store, seed=1, lost_response_rate=1.0)
        with pytest.raises(TransientError, match="response lost"):
            faulty.put("a", b"1")
        with pytest.raises(TransientError, match="response lost"):
            faulty.put_if_absent("b", b"2")
        assert store.get("a") == b"1" and store.get("b") == b"2"
        with pytest.raises(TransientError, match="response lost"):
            faulty.delete("a")
        assert not store.exists("a")
        assert faulty.get("b") == b"2"  # reads have no response to lose
        assert faulty.responses_lost == 3
        assert faulty.errors_injected == 0

    def test_same_seed_same_faults(self, store: ObjectStore) -> None:
        """The same seed injects the same faults (runs are reproducible)."""

        def run(seed: int) -> list[bool]:
            faulty = FaultyObjectStore(store, seed=seed, error_rate=0.3)
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

    def test_retry_gives_up_after_policy_attempts(self, store: ObjectStore) -> None:
        """Retries stop after the policy's attempts and raise the last error."""
        faulty = FaultyObjectStore(store, seed=1, error_rate=1.0)
        retried = RetryingObjectStore(faulty, RetryPolicy(attempts=3, base_delay=0.0001))
        with pytest.raises(TransientError):
            retried.put("k", b"v")
        assert faulty.errors_injected == 3
        assert not store.exists("k")

    def test_retry_does_not_retry_permanent_errors(self, store: ObjectStore) -> None:
        """Not-found and invalid-input errors are raised at once, not retried."""
        faulty = FaultyObjectStore(store, seed=1)
        retried = RetryingObjectStore(faulty, FAST)
        with pytest.raises(NotFoundError, match="missing"):
            retried.get("missing")
        with pytest.raises(InvalidInputError):
            retried.put("/bad", b"")

    def test_put_if_absent_retry_not_fooled_by_another_writer(self, store: ObjectStore) -> None:
        """After a transient failure, "exists" is only taken as ours if the bytes are ours."""
        shim = OtherWriterWins(store)
        retried = RetryingObjectStore(shim, FAST)
        assert retried.put_if_absent("k", b"mine") is False
        assert shim.calls == 2
        assert store.get("k") == b"someone else"

    @pytest.mark.parametrize(
        "kwargs", [{"error_rate": 1.5}, {"lost_response_rate": -0.1}, {"latency": -1.0}]
    )
    def test_fault_parameters_validated(self, store: ObjectStore, kwargs: dict[str, float]) -> None:
        """Fault rates outside [0, 1] and negative latencies are refused with InvalidInputError."""
        with pytest.raises(InvalidInputError):
            FaultyObjectStore(store, seed=0, **kwargs)
