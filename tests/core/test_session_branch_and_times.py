"""Sessions of a deleted branch, and one type (datetime) for every time the API returns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(4,), dtype="i4")[:] = np.arange(4)
    s.commit("a")
    return repo


def test_a_session_of_a_deleted_branch_cannot_commit_and_still_reads(repo):
    base = repo.create_branch("dev")
    s = repo.create_session("dev")
    zarr.open_array(s.store, path="a")[:2] = -1
    repo.delete_branch("dev")
    with pytest.raises(zl.NotFoundError, match="branch 'dev' was deleted after this session"):
        s.commit("lost")
    assert s.state == "open"
    assert s.base_commit == base
    assert zarr.open_array(s.store, path="a", mode="r")[2:].tolist() == [2, 3]
    assert repo.resolve("main") == base and "dev" not in repo.list_branches()


def test_session_times_are_timezone_aware_datetimes_everywhere(repo):
    s = repo.create_session(expires_in=timedelta(hours=3))
    assert repo.list_sessions() == []  # stored at its first write, hand-over or commit
    assert s.id is not None  # handing the id over stores it
    [info] = repo.list_sessions()
    for value in (info.created, info.expires_at, s.expires_at, repo.session_info(s.id).created):
        assert isinstance(value, datetime) and value.utcoffset() == timedelta(0)
    assert info.expires_at == s.expires_at
    assert info.created <= datetime.now(UTC) < info.expires_at
    assert timedelta(hours=2.9) < info.expires_at - info.created <= timedelta(hours=3)
    assert isinstance(repo.log()[0].timestamp, datetime)
