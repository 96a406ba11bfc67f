"""zarrlake.testing.faults.enable_from_env: ZARRLAKE_FAULTS wraps every backend opened
afterwards, through the registries' hooks (the production open path has no fault code)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from zarrlake.errors import InvalidInputError, TransientError
from zarrlake.metastore import open_metastore
from zarrlake.storage import open_storage
from zarrlake.storage.retrying import RetryingObjectStore
from zarrlake.testing import faults
from zarrlake.testing.faults import FaultDice, FaultyMetaStore, FaultyObjectStore


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    faults.disable()


def _outcomes(call, n: int = 40) -> list[bool]:
    out = []
    for _ in range(n):
        try:
            call()
            out.append(True)
        except TransientError:
            out.append(False)
    return out


def test_unset_or_empty_changes_nothing(env):
    env.delenv(faults.ENV, raising=False)
    assert faults.enable_from_env() is False
    env.setenv(faults.ENV, " ")
    assert faults.enable_from_env() is False
    assert not isinstance(open_storage("memory://plain", retry_policy=None), FaultyObjectStore)


def test_every_backend_opened_afterwards_is_faulty(env):
    env.setenv(faults.ENV, "seed=3,error_rate=0.5,latency=0")
    assert faults.enable_from_env() is True
    name = uuid.uuid4().hex
    store = open_storage(f"memory://{name}")
    assert isinstance(store, RetryingObjectStore)  # Retrying(Faulty(raw))
    assert isinstance(store.inner, FaultyObjectStore)
    meta = open_metastore(f"memory://{name}")
    assert isinstance(meta, FaultyMetaStore)
    # storage draws from seed 3, the metastore from seed 4
    ref3, ref4 = FaultDice(seed=3, error_rate=0.5), FaultDice(seed=4, error_rate=0.5)
    assert _outcomes(lambda: store.inner.exists("k")) == _outcomes(lambda: ref3.before("x"))
    assert _outcomes(lambda: meta.get("p", b"k")) == _outcomes(lambda: ref4.before("x"))
    faults.disable()
    assert not isinstance(open_metastore(f"memory://{name}"), FaultyMetaStore)


@pytest.mark.parametrize(
    "spec", ["seed=x", "error_rate=2", "latency=-1", "colour=red", "error_rate"]
)
def test_bad_spec_is_named(env, spec: str):
    env.setenv(faults.ENV, spec)
    with pytest.raises(InvalidInputError):
        faults.enable_from_env()
    assert not isinstance(open_storage("memory://plain", retry_policy=None), FaultyObjectStore)
