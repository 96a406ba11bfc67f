"""zarr's stateful property tests (zarr.testing.stateful) against the session store: random
sequences of store operations, and of array/group operations, compared with zarr's own
MemoryStore as the model."""

from __future__ import annotations

import secrets

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from zarr.testing.stateful import ZarrHierarchyStateMachine, ZarrStoreStateMachine

import zarrlake as zl

BOUNDED = settings(
    max_examples=12,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture(params=["local-sqlite", "memory"])
def stateful_repo(request, tmp_path) -> zl.Repo:
    if request.param == "local-sqlite":
        return zl.Repo.create(tmp_path / "repo")
    return zl.Repo.create(f"memory://{secrets.token_hex(6)}")


def test_zarr_store_state_machine(stateful_repo: zl.Repo) -> None:
    def machine() -> ZarrStoreStateMachine:
        return ZarrStoreStateMachine(stateful_repo.create_session("main").store)

    run_state_machine_as_test(machine, settings=BOUNDED)


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
def test_zarr_hierarchy_state_machine(local_repo: zl.Repo) -> None:
    """Array and group operations (create, resize, overwrite, delete) through zarr's API;
    local + SQLite only, to keep the run short."""

    def machine() -> ZarrHierarchyStateMachine:
        return ZarrHierarchyStateMachine(local_repo.create_session("main").store)

    run_state_machine_as_test(machine, settings=settings(BOUNDED, max_examples=8))
