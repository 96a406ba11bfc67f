"""Conformance under faults: behind RetryingMetaStore, injected errors and lost responses
on the backend must not change results. Part of MetaStoreTests."""

from __future__ import annotations

import random

import pytest

from zarrlake._util.retry import RetryPolicy
from zarrlake.errors import CASFailedError, TransientError
from zarrlake.metastore import MetaStore, WrapperMetaStore
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.testing.faults import FaultyMetaStore


def stored(got: tuple[bytes, int] | None) -> tuple[bytes, int]:
    """(value, version) of a key the test wrote: `MetaStore.get`'s answer, present."""
    assert got is not None
    return got


P = "part"
FAST = RetryPolicy(attempts=12, base_delay=0.0005, max_delay=0.005)


class OverwrittenAfterLanding(WrapperMetaStore):
    """set_if lands, another writer overwrites it, then our response is lost."""

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        """Land the swap, let another writer overwrite it, then lose the reply."""
        self.inner.set_if(partition, key, value, expected)
        self.inner.set(partition, key, b"someone else")
        raise TransientError("response lost")


class DeletedThenCreatedAgain(WrapperMetaStore):
    """delete_if lands and its response is lost; with `recreate`, another writer creates the
    key anew before the retry."""

    def __init__(self, inner: MetaStore, recreate: bool = False) -> None:
        super().__init__(inner)
        self.recreate = recreate
        self.lost = False

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        """Delete, then lose the first reply (recreating the key first, if asked)."""
        self.inner.delete_if(partition, key, expected)
        if not self.lost:
            self.lost = True
            if self.recreate:
                self.inner.set_if(partition, key, b"someone else's", None)
            raise TransientError("response lost")


class RetriedMetaStoreTests:
    """Needs a `store` fixture (MetaStoreTests has it)."""

    def test_cas_increments_survive_faults(self, store: MetaStore):
        """Counter increments through retries under errors and lost replies are each counted
        once."""
        faulty = FaultyMetaStore(store, seed=1, error_rate=0.05, lost_response_rate=0.05)
        retried = RetryingMetaStore(faulty, FAST)
        done = conflicts = 0
        while done < 300:
            got = retried.get(P, b"counter")
            count, version = (int(got[0]), got[1]) if got else (0, None)
            try:
                retried.set_if(P, b"counter", str(count + 1).encode(), version)
            except CASFailedError:
                conflicts += 1  # would be a false conflict: nobody else writes this key
                continue
            done += 1
        assert int(stored(store.get(P, b"counter"))[0]) == 300
        assert conflicts == 0
        assert faulty.errors_injected > 0 and faulty.responses_lost > 0

    def test_set_and_set_many_with_faults_reach_the_intended_state(self, store: MetaStore):
        """Random writes through retries under faults end in the state a fault-free run would."""
        faulty = FaultyMetaStore(store, seed=2, error_rate=0.05, lost_response_rate=0.05)
        retried = RetryingMetaStore(faulty, FAST)
        rng = random.Random(3)
        model: dict[bytes, bytes] = {}
        for i in range(300):
            op = rng.choice(["set", "set_many", "delete"])
            key = f"k{rng.randrange(40):02d}".encode()
            if op == "set":
                retried.set(P, key, f"set{i}".encode())
                model[key] = f"set{i}".encode()
            elif op == "delete":
                retried.delete(P, key)
                model.pop(key, None)
            else:
                batch = [
                    (
                        f"k{rng.randrange(40):02d}".encode(),
                        None if rng.random() < 0.3 else b"m%d" % i,
                    )
                    for _ in range(5)
                ]
                retried.set_many(P, batch)
                for k, v in batch:
                    if v is None:
                        model.pop(k, None)
                    else:
                        model[k] = v
        assert {k: v for k, v, _ in store.scan(P)} == model
        assert {k: v for k, v, _ in retried.scan(P)} == model
        assert faulty.errors_injected > 0 and faulty.responses_lost > 0

    def test_scan_restarts_after_the_last_key_yielded(self, store: MetaStore):
        """A scan interrupted by errors resumes after its last key: no key is lost or repeated."""
        n = 1234
        store.set_many(P, [(f"k{i:05d}".encode(), b"v") for i in range(n)])
        faulty = FaultyMetaStore(store, seed=4, error_rate=0.3)
        retried = RetryingMetaStore(
            faulty, RetryPolicy(attempts=30, base_delay=0.0001, max_delay=0.001)
        )
        got = [k for k, _, _ in retried.scan(P)]
        assert got == [f"k{i:05d}".encode() for i in range(n)]
        assert faulty.errors_injected > 1
        limited = [k for k, _, _ in retried.scan(P, prefix=b"k00", limit=250)]
        assert limited == [f"k{i:05d}".encode() for i in range(250)]

    def test_lost_cas_response_is_not_a_false_conflict(self, store: MetaStore):
        """A swap that landed but whose reply was lost is reported as done, not as a conflict."""
        faulty = FaultyMetaStore(store, seed=5, lost_response_rate=1.0)
        retried = RetryingMetaStore(faulty, FAST)
        created = retried.set_if(P, b"k", b"v1", None)
        assert store.get(P, b"k") == (b"v1", created)
        moved = retried.set_if(P, b"k", b"v2", created)
        assert store.get(P, b"k") == (b"v2", moved)
        assert faulty.responses_lost == 2

    def test_failed_cas_stays_failed_when_its_response_is_lost(self, store: MetaStore):
        """A swap that failed still fails when its reply was lost."""
        current = store.set(P, b"k", b"theirs")
        retried = RetryingMetaStore(FaultyMetaStore(store, seed=6, lost_response_rate=1.0), FAST)
        with pytest.raises(CASFailedError):
            retried.set_if(P, b"k", b"ours", current + 1000)
        with pytest.raises(CASFailedError):
            retried.set_if(P, b"k", b"ours", None)
        assert store.get(P, b"k") == (b"theirs", current)

    def test_lost_response_then_overwritten_is_a_conflict(self, store: MetaStore):
        """A landed swap overwritten before the retry checks it is reported as a conflict."""
        version = store.set(P, b"k", b"start")
        retried = RetryingMetaStore(OverwrittenAfterLanding(store), FAST)
        with pytest.raises(CASFailedError):
            retried.set_if(P, b"k", b"ours", version)
        assert stored(store.get(P, b"k"))[0] == b"someone else"

    def test_lost_delete_if_response_keeps_a_key_created_again(self, store: MetaStore):
        """A retried compare-and-delete after a lost reply never removes a key made anew."""
        version = store.set_if(P, b"k", b"v", None)
        retried = RetryingMetaStore(DeletedThenCreatedAgain(store), FAST)
        retried.delete_if(P, b"k", version)  # landed; the retry sees the key absent: done
        assert store.get(P, b"k") is None
        version = store.set_if(P, b"k", b"v", None)
        recreating = DeletedThenCreatedAgain(store, recreate=True)
        with pytest.raises(CASFailedError):
            RetryingMetaStore(recreating, FAST).delete_if(P, b"k", version)
        assert stored(store.get(P, b"k"))[0] == b"someone else's"  # a plain retried delete drops it
