"""Revert (a new commit undoing one commit) and reset_branch (compare-and-swap a branch)."""

from __future__ import annotations

import json

import pytest
import zarr

import zarrlake as zl
from tests.helpers.history import chunk_values, commit_chunks


def test_revert_of_a_middle_commit_restores_exactly_its_chunks_and_metadata(repo):
    commit_chunks(repo, "main", {1: 1, 2: 1})
    s = repo.create_session()
    arr = zarr.open_array(s.store, path="a")
    arr[30:50] = 9  # chunks 3 and 4
    arr.attrs["units"] = "K"
    middle = s.commit("the bad one")
    commit_chunks(repo, "main", {5: 5, 1: 7})
    before = chunk_values(repo, "main")
    cid = repo.revert(middle, message="undo the bad one")
    assert chunk_values(repo, "main") == [0, 7, 1, 0, 0, 5, 0, 0, 0, 0]
    assert before[3:5] == [9, 9]
    doc = json.loads(repo.readonly_session("main").read("a/zarr.json"))
    assert "units" not in doc["attributes"]
    rec = repo.log("main", limit=1)[0]
    assert rec.id == cid and rec.message == "undo the bad one"
    assert len(rec.parent_ids) == 1
    d = repo.diff("main^", "main")
    touched = d.chunks_written.get("a", set()) | d.chunks_deleted.get("a", set())
    assert touched == {(3,), (4,)}
    assert d.metadata_changed == {"a"}
    # the default message names what was reverted
    repo.revert(cid)
    assert repo.log("main", limit=1)[0].message.startswith('Revert "undo the bad one"')
    assert chunk_values(repo, "main") == before


def test_revert_of_a_commit_whose_chunks_were_rewritten_later_conflicts(repo):
    bad = commit_chunks(repo, "main", {1: 1, 2: 2})
    head = commit_chunks(repo, "main", {2: 3})
    with pytest.raises(zl.ConflictError) as e:
        repo.revert(bad)
    assert [(c.path, c.kind, c.chunks) for c in e.value.conflicts] == [("a", "chunk", [(2,)])]
    assert repo.resolve("main") == head


def test_revert_on_another_branch_and_of_the_root_commit(repo):
    first = repo.log("main")[-1].id
    with pytest.raises(ValueError, match="no parent"):
        repo.revert(first)
    c = commit_chunks(repo, "main", {4: 4})
    repo.create_branch("fix")
    repo.revert(c, branch="fix")
    assert chunk_values(repo, "fix")[4] == 0
    assert chunk_values(repo, "main")[4] == 4


def test_reset_branch_with_wrong_expected_fails_and_moves_nothing(repo):
    old = repo.resolve("main")
    new = commit_chunks(repo, "main", {1: 1})
    with pytest.raises(zl.ConflictError, match="not the expected"):
        repo.reset_branch("main", old, expected=old)
    assert repo.resolve("main") == new
    assert repo.reset_branch("main", old, expected=new) == old
    assert repo.resolve("main") == old
    assert chunk_values(repo, "main")[1] == 0
    # without expected: moves anywhere, e.g. forward again, by ref expression
    repo.create_tag("t", at=new)
    repo.reset_branch("main", "t")
    assert repo.resolve("main") == new
    repo.reset_branch("main", "main~1")
    assert repo.resolve("main") == old
    with pytest.raises(zl.NotFoundError):
        repo.reset_branch("nope", old)
    with pytest.raises(zl.NotFoundError):
        repo.reset_branch("main", "0" * 8)


def test_reset_then_session_based_on_the_old_head_conflicts(repo):
    old = repo.resolve("main")
    commit_chunks(repo, "main", {1: 1})
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[0:10] = 3
    repo.reset_branch("main", old)
    with pytest.raises(zl.ConflictError):
        s.commit("based on a head that was reset away")
    assert repo.resolve("main") == old
