"""Sessions that clean up after themselves: `with repo.create_session() as s:` abandons the
session when the block raises, and `abandon_sessions` / `sessions abandon --older-than`
abandon a failed job's leftovers at once."""

from __future__ import annotations

import time
from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "repo")
    with repo.create_session() as s:
        zarr.open_group(s.store).create_array("a", shape=(4,), dtype="i4")[:] = np.arange(4)
        s.commit("a")
    yield repo
    repo.close()


def test_a_block_that_raises_abandons_its_session(repo):
    head = repo.resolve("main")
    with pytest.raises(RuntimeError, match="job failed"), repo.create_session() as s:
        zarr.open_array(s.store, path="a")[:] = -1
        raise RuntimeError("job failed")
    assert s.state == "abandoned" and repo.list_sessions() == []
    assert repo.resolve("main") == head


def test_a_committed_session_is_left_alone(repo):
    with pytest.raises(RuntimeError), repo.create_session() as s:
        zarr.open_array(s.store, path="a")[0] = 9
        cid = s.commit("nine")
        raise RuntimeError("after the commit")
    assert s.state == "committed" and repo.resolve("main") == cid
    with repo.create_session() as open_one:  # a block that ends normally changes nothing
        pass
    assert open_one.status == "open"
    with pytest.raises(KeyError), repo.readonly_session() as ro:  # nothing to abandon
        raise KeyError("x")
    assert ro.read_only


def test_abandon_sessions_older_than_an_age(repo):
    now = [time.time()]
    repo._context.clock = lambda: now[0]
    old = [repo.create_session(message=f"old {i}").id for i in range(3)]
    repo.create_branch("dev")
    old_dev = repo.create_session("dev").id
    now[0] += 3 * 3600
    young = repo.create_session().id
    assert repo.abandon_sessions(timedelta(hours=2), branch="dev") == [old_dev]
    assert sorted(repo.abandon_sessions(timedelta(hours=2))) == sorted(old)  # same age
    assert [s.id for s in repo.list_sessions()] == [young]
    assert repo.session_info(old[0]).status == "abandoned"
    with pytest.raises(zl.errors.InvalidInputError, match="must not be negative"):
        repo.abandon_sessions(timedelta(hours=-1))


def test_sessions_abandon_older_than_on_the_command_line(repo):
    r = repo.spec.location
    ids = [repo.create_session(message="leftover").id for _ in range(2)]
    out = ok("-r", r, "sessions", "abandon", "--older-than", "0s", "--json").json()
    assert sorted(out["abandoned"]) == sorted(ids)
    assert (
        "no open session is 2h old"
        in ok("-r", r, "sessions", "abandon", "--older-than", "2h").stdout
    )
    assert "not both" in fails("-r", r, "sessions", "abandon", code=2)
    line = fails("-r", r, "sessions", "abandon", ids[0], "--older-than", "2h", code=2)
    assert "not both" in line
    assert "bad duration" in fails("-r", r, "sessions", "abandon", "--older-than", "soon", code=2)
    one = repo.create_session().id
    assert ok("-r", r, "sessions", "abandon", one[:8], "--json").json()["id"] == one
