"""open_metastore: URL errors, the scheme registry; the fault and retry wrappers' own
behaviour (seeds, attempts, latency, settings)."""

from __future__ import annotations

import time
import uuid

import pytest

from zarrlake import metastore
from zarrlake._util.retry import RetryPolicy
from zarrlake.errors import InvalidInputError, TransientError
from zarrlake.metastore import MetaStore, open_metastore, prefix_upper_bound
from zarrlake.metastore.memory import MemoryMetaStore
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.testing.faults import FaultyMetaStore

P = "part"


def test_prefix_upper_bound():
    assert prefix_upper_bound(b"a") == b"b"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"") is None


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("foo://x", "scheme"),
        ("no-scheme-at-all", "scheme"),
        ("", "scheme"),
        ("sqlite://", "sqlite"),
        ("sqlite:///", "no database file"),
        ("sqlite://host/x.db", "host"),
        ("sqlite:///dir/", "no database file"),
        ("sqlite:///:memory:", "memory://"),
        ("sqlite:///x.db?journal=off", "unknown option"),
        ("sqlite:///x.db?synchronous=sometimes", "unknown option"),
        ("memory://", "needs a name"),
        ("postgresql://127.0.0.1:5432", "names no database"),
        ("postgresql://user:secret@127.0.0.1:port/db", "bad port"),
        ("postgres://127.0.0.1/db?no_such_option=1", "invalid PostgreSQL URL"),
    ],
)
def test_invalid_urls(url: str, complaint: str):
    with pytest.raises(InvalidInputError, match=complaint) as info:
        open_metastore(url)
    assert "secret" not in str(info.value)


def test_url_must_be_a_string():
    with pytest.raises(InvalidInputError, match="string"):
        open_metastore(42)  # type: ignore[arg-type]


def test_registered_scheme_opens_through_its_factory():
    opened: list[str] = []

    def factory(url: str) -> MetaStore:
        opened.append(url)
        return MemoryMetaStore("memory://" + url.split("://", 1)[1])

    scheme = f"test{uuid.uuid4().hex[:8]}"
    metastore.register(scheme, factory)
    meta = open_metastore(f"{scheme.upper()}://x-{scheme}")
    assert opened == [f"{scheme.upper()}://x-{scheme}"]
    meta.set(P, b"k", b"v")
    assert open_metastore(f"memory://x-{scheme}").get(P, b"k")[0] == b"v"
    assert scheme in metastore.registry.schemes()


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(InvalidInputError, match="foo") as info:
        open_metastore("foo://x")
    for known in ("memory://", "sqlite://", "postgresql://"):
        assert known in str(info.value)


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
