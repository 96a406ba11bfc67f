"""Protected branches (rules in the metastore, obeyed by every client) and blame."""

from __future__ import annotations

import pytest
import zarr

import zarrlake as zl
from tests.helpers.history import commit_chunks
from zarrlake.errors import InvalidInputError, ReadOnlyError


def test_main_cannot_be_deleted_unless_protection_allows_it(repo):
    with pytest.raises(ReadOnlyError, match="main"):
        repo.delete_branch("main")
    assert "main" in repo.list_branches()
    repo.protect_branch("main", allow_delete=True)
    repo.delete_branch("main")
    assert "main" not in repo.list_branches()


def test_protected_branch_refuses_direct_commits_but_takes_merges(repo):
    repo.create_branch("dev")
    repo.protect_branch("main")
    assert repo.protected_branches() == {
        "main": {"allow_direct_commits": False, "allow_delete": False}
    }
    head = repo.resolve("main")
    s = repo.create_session("main")
    zarr.open_array(s.store, path="a")[0:10] = 1
    with pytest.raises(ReadOnlyError, match=r"protected.*'main'"):
        s.commit("direct")
    assert repo.resolve("main") == head
    assert s.state == "open"  # the session stays usable: abandon it or move its work
    # merges, reverts and resets into it are allowed
    d = commit_chunks(repo, "dev", {2: 2})
    assert repo.merge("dev") == d
    repo.revert(d)
    repo.reset_branch("main", d)
    # a second, independent client sees the same rule
    other = zl.Repo.open(repo.spec.location)
    s2 = other.create_session("main")
    zarr.open_array(s2.store, path="a")[50:60] = 5
    with pytest.raises(ReadOnlyError):
        s2.commit("from another client")
    other.close()
    # direct commits once allowed
    repo.protect_branch("main", allow_direct_commits=True)
    commit_chunks(repo, "main", {3: 3})
    repo.unprotect_branch("main")
    assert repo.protected_branches() == {}
    with pytest.raises(zl.NotFoundError):
        repo.unprotect_branch("main")


def test_glob_rules_and_the_strictest_rule_wins(repo):
    repo.protect_branch("release/*", allow_direct_commits=True, allow_delete=True)
    repo.create_branch("release/1")
    repo.create_branch("dev")
    commit_chunks(repo, "release/1", {1: 1})
    commit_chunks(repo, "dev", {1: 1})
    repo.protect_branch("release/1")
    with pytest.raises(ReadOnlyError, match="release/1"):
        commit_chunks(repo, "release/1", {2: 2})
    with pytest.raises(ReadOnlyError, match="deleted"):
        repo.delete_branch("release/1")
    repo.create_branch("release/2")
    repo.delete_branch("release/2")
    repo.delete_branch("dev")
    for bad in ["", "a b", "x..y", "HEAD", 3]:
        with pytest.raises(InvalidInputError):
            repo.protect_branch(bad)


def test_blame_names_the_commit_that_last_wrote_a_chunk(repo):
    first = commit_chunks(repo, "main", {1: 1, 2: 2})
    second = commit_chunks(repo, "main", {2: 3})
    repo.create_branch("dev")
    on_dev = commit_chunks(repo, "dev", {4: 4})
    later = commit_chunks(repo, "main", {5: 5})
    merged = repo.merge("dev", fast_forward="never")
    assert repo.blame("a", (1,)).id == first
    assert repo.blame("a", (2,)).id == second
    assert repo.blame("/a", [2], ref="main~1").id == second
    assert repo.blame("a", (2,), ref=first).id == first
    assert repo.blame("a", (4,)).id == on_dev  # through the merge, into the side it came from
    assert repo.blame("a", (5,)).id == later
    with pytest.raises(zl.NotFoundError, match="never written"):
        repo.blame("a", (0,))  # all fill value: zarr stores no chunk
    assert repo.log("main", limit=1)[0].id == merged
    with pytest.raises(zl.NotFoundError, match="never written"):
        repo.blame("a", (4,), ref="main~1")
    with pytest.raises(zl.NotFoundError):
        repo.blame("nope", (0,))
    with pytest.raises(InvalidInputError, match="dimensions"):
        repo.blame("a", (0, 0))
