"""Three-way merge, chunk by chunk, against the merge base."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.history import CHUNK, NCHUNKS, chunk_values, commit_chunks
from zarrlake.errors import InvalidInputError


def test_disjoint_chunk_sets_both_land(repo):
    base = repo.resolve("main")
    repo.create_branch("dev")
    dev = commit_chunks(repo, "dev", {1: 5, 2: 6})
    main = commit_chunks(repo, "main", {3: 7})
    cid = repo.merge("dev", message="bring dev in", author="ann")
    assert chunk_values(repo, "main") == [0, 5, 6, 7, 0, 0, 0, 0, 0, 0]
    merged = repo.log("main", limit=1)[0]
    assert merged.id == cid
    assert merged.parent_ids == (main, dev)
    assert (merged.message, merged.author) == ("bring dev in", "ann")
    assert repo.merge_base("main", "dev") == dev
    assert repo.merge_base("main~1", "dev") == base
    # log follows first parents: dev's commit is not on main's first-parent line
    assert [c.id for c in repo.log("main")][:3] == [cid, main, base]
    # the merge commit's diff against its first parent is exactly dev's chunks
    d = repo.diff("main^", "main")
    assert d.chunks_written == {"a": {(1,), (2,)}}


def test_same_chunk_both_sides_conflicts_and_into_is_untouched(repo):
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {1: 5, 4: 8})
    head = commit_chunks(repo, "main", {1: 6, 2: 9})
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("dev")
    assert [(c.path, c.kind, c.chunks) for c in e.value.conflicts] == [("a", "chunk", [(1,)])]
    assert "(1,)" in str(e.value)
    assert repo.resolve("main") == head
    assert chunk_values(repo, "main") == [0, 6, 9, 0, 0, 0, 0, 0, 0, 0]


def test_every_conflicting_chunk_is_listed(repo):
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {i: 1 for i in range(NCHUNKS)})
    commit_chunks(repo, "main", {i: 2 for i in range(0, NCHUNKS, 2)})
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("dev")
    assert e.value.conflicts[0].chunks == [(i,) for i in range(0, NCHUNKS, 2)]


def test_identical_bytes_on_both_sides_is_not_a_conflict(repo):
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {1: 5, 2: 3})
    commit_chunks(repo, "main", {1: 5, 7: 4})
    repo.merge("dev")
    assert chunk_values(repo, "main") == [0, 5, 3, 0, 0, 0, 0, 4, 0, 0]


@pytest.mark.parametrize(("policy", "winner"), [("ours", 6), ("theirs", 5)])
def test_ours_and_theirs_take_the_right_chunks(repo, policy, winner):
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {1: 5, 2: 3})
    commit_chunks(repo, "main", {1: 6, 7: 4})
    repo.merge("dev", on_conflict=policy)
    assert chunk_values(repo, "main") == [0, winner, 3, 0, 0, 0, 0, 4, 0, 0]


def test_bad_options_are_refused(repo):
    repo.create_branch("dev")
    with pytest.raises(InvalidInputError, match="on_conflict"):
        repo.merge("dev", on_conflict="mine")
    with pytest.raises(InvalidInputError, match="fast_forward"):
        repo.merge("dev", fast_forward="sometimes")
    with pytest.raises(zl.NotFoundError):
        repo.merge("nope")
    with pytest.raises(zl.NotFoundError):
        repo.merge("dev", into="nope")


def test_fast_forward_merge_commit_and_only(repo):
    start = repo.resolve("main")
    repo.create_branch("dev")
    dev = commit_chunks(repo, "dev", {1: 5})
    # allow: main simply moves to dev's head
    assert repo.merge("dev") == dev
    assert repo.resolve("main") == dev
    # merging again changes nothing
    assert repo.merge("dev") == dev
    # never: a merge commit even though a fast-forward was possible
    repo.reset_branch("main", start)
    cid = repo.merge("dev", fast_forward="never")
    assert cid != dev
    assert repo.log("main", limit=1)[0].parent_ids == (start, dev)
    assert chunk_values(repo, "main") == chunk_values(repo, "dev")
    # only: refuses once the branches diverged, and moves nothing
    dev2 = commit_chunks(repo, "dev", {2: 6})
    head = commit_chunks(repo, "main", {3: 7})
    with pytest.raises(zl.ConflictError, match="diverged"):
        repo.merge("dev", fast_forward="only")
    assert repo.resolve("main") == head
    repo.create_branch("ff", at=head)
    commit_chunks(repo, "ff", {4: 1})
    assert repo.merge("ff", fast_forward="only") == repo.resolve("ff")
    assert repo.resolve("dev") == dev2


def _resize(repo: zl.Repo, branch: str, shape: int) -> None:
    s = repo.create_session(branch)
    zarr.open_array(s.store, path="a").resize((shape,))
    s.commit(f"resize to {shape}")


def test_resize_on_one_side_conflicts_with_chunk_writes_on_the_other(repo):
    repo.create_branch("dev")
    _resize(repo, "dev", CHUNK * NCHUNKS * 2)
    head = commit_chunks(repo, "main", {3: 7})
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("dev")
    assert {(c.path, c.kind) for c in e.value.conflicts} == {("a", "resized")}
    assert e.value.conflicts[0].chunks == [(3,)]
    assert repo.resolve("main") == head
    # and the other way round
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("main", into="dev")
    assert {(c.path, c.kind) for c in e.value.conflicts} == {("a", "resized")}


def test_resize_merges_when_the_other_side_wrote_nothing_there(repo):
    repo.create_branch("dev")
    _resize(repo, "dev", CHUNK * NCHUNKS * 2)
    s = repo.create_session()
    zarr.open_group(s.store, mode="a").create_array("b", shape=(4,), chunks=(2,), dtype="i8")[:] = 1
    s.commit("add b")
    repo.merge("dev")
    snap = repo.readonly_session("main")
    assert zarr.open_array(snap.store, path="a", mode="r").shape == (CHUNK * NCHUNKS * 2,)
    assert zarr.open_array(snap.store, path="b", mode="r")[:].tolist() == [1, 1, 1, 1]


def _set_attrs(repo: zl.Repo, branch: str, **attrs) -> None:
    s = repo.create_session(branch)
    zarr.open_array(s.store, path="a").attrs.update(attrs)
    s.commit(f"attrs {attrs}")


def _attrs(repo: zl.Repo, ref: str) -> dict:
    s = repo.readonly_session(ref)
    return json.loads(s.read("a/zarr.json"))["attributes"]


def test_attributes_merge_key_by_key(repo):
    _set_attrs(repo, "main", units="K", keep="x")
    repo.create_branch("dev")
    _set_attrs(repo, "dev", source="era5", units="K")
    _set_attrs(repo, "main", history="fixed")
    repo.merge("dev")
    assert _attrs(repo, "main") == {"units": "K", "keep": "x", "source": "era5", "history": "fixed"}


def test_attributes_set_differently_on_both_sides_conflict(repo):
    repo.create_branch("dev")
    _set_attrs(repo, "dev", units="K", a=1)
    _set_attrs(repo, "main", units="degC", b=2)
    head = repo.resolve("main")
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("dev")
    (c,) = e.value.conflicts
    assert (c.path, c.kind) == ("a", "metadata")
    assert "units" in c.detail
    assert repo.resolve("main") == head
    # chunk policies never resolve metadata conflicts
    with pytest.raises(zl.ConflictError):
        repo.merge("dev", on_conflict="theirs")


def test_delete_on_one_side_conflicts_with_writes_on_the_other(repo):
    repo.create_branch("dev")
    s = repo.create_session("dev")
    zarr.open_group(s.store, mode="a").__delitem__("a")
    s.commit("drop a")
    commit_chunks(repo, "main", {2: 1})
    with pytest.raises(zl.ConflictError) as e:
        repo.merge("dev")
    assert "deleted" in {c.kind for c in e.value.conflicts}


def test_merge_of_new_arrays_and_merged_history_merges_again(repo):
    """Criss-cross-free repeated merges: main -> dev -> main, each against the right base."""
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {1: 1})
    commit_chunks(repo, "main", {2: 2})
    m1 = repo.merge("dev")
    repo.merge("main", into="dev")  # fast-forward dev to the merge
    assert repo.resolve("dev") == m1
    commit_chunks(repo, "dev", {1: 3})
    commit_chunks(repo, "main", {5: 5})
    assert repo.merge_base("main", "dev") == m1
    repo.merge("dev")
    assert chunk_values(repo, "main") == [0, 3, 2, 0, 0, 5, 0, 0, 0, 0]
    values = np.asarray(chunk_values(repo, "main"))
    assert values.sum() == 10
