"""Squash: a branch's first-parent history after a commit replaced by one commit of the same
tree, by compare-and-swap; gc then reclaims what only the squashed commits held."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.vc.squash import squash, squashed

N, CHUNK = 40, 10  # 4 chunks of 10 float64 (800 bytes: chunk objects)


def make(repo_args: dict) -> tuple[zl.Repo, str]:
    """A repository with array `a` (chunk objects) on main; returns it and that commit."""
    repo = zl.Repo.create(**repo_args, settings={"stage_inline_max": 0})
    s = repo.create_session()
    arr = zarr.open_group(s.store).create_array(
        "a", shape=(N,), chunks=(CHUNK,), dtype="f8", compressors=None
    )
    arr[:] = np.arange(N, dtype="f8")
    return repo, s.commit("create a")


def write(repo: zl.Repo, branch: str, path: str, where: slice, value: float) -> str:
    s = repo.create_session(branch)
    zarr.open_array(s.store, path=path)[where] = value
    return s.commit(f"{path}[{where.start}:{where.stop}] = {value}")


def read(repo: zl.Repo, ref: str, path: str) -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


def test_squash_then_gc_on_every_metastore(any_metastore):
    """Five commits squashed into one with the head's tree; after gc, the chunks only the
    squashed commits held are gone, the data reads back equal to numpy and fsck is clean."""
    repo, since = make(any_metastore)
    try:
        expected = np.arange(N, dtype="f8")
        for i in range(4):  # chunk 0 rewritten four times: three versions become garbage
            write(repo, "main", "a", slice(0, 10), 100.0 + i)
        expected[0:10] = 103.0
        s = repo.create_session()
        s.move("a", "b")
        zarr.open_array(s.store, path="b")[30:40] = -1.0
        head = s.commit("rename a to b, write its last chunk")
        expected[30:40] = -1.0
        old_head_snapshot = repo._context.objects.snapshot_of(head)
        chunks_before = set(repo._context.object_store.list("chunks/"))

        new = repo.squash("main", since=since, message="a's first week")
        log = repo.log("main")
        assert [c.id for c in log[:2]] == [new, since]
        assert log[0].message == "a's first week" and log[0].parent_ids == (since,)
        assert repo._context.objects.snapshot_of(new) == old_head_snapshot  # same tree, reused
        changes = repo.commit_changes(new)
        assert changes.nodes_moved == {"a": "b"}
        assert changes.chunks_written == {"b": {(0,), (3,)}}
        np.testing.assert_array_equal(read(repo, "main", "b"), expected)
        # the squashed commits are still readable by id until gc
        np.testing.assert_array_equal(read(repo, head, "b"), expected)

        report = repo.gc(older_than=timedelta(0))
        assert report.by_kind["commits"][0] == 5
        gone = chunks_before - set(repo._context.object_store.list("chunks/"))
        digest = repo._context.objects.digest
        overwritten = {np.full(CHUNK, 100.0 + i).tobytes() for i in range(3)}
        assert gone == {chunk_object_key(digest(b)) for b in overwritten}
        np.testing.assert_array_equal(read(repo, "main", "b"), expected)
        np.testing.assert_array_equal(read(repo, since, "a"), np.arange(N, dtype="f8"))
        assert repo.fsck() == []
        assert not repo._context.object_store.exists(f"commits/{head}")
    finally:
        repo.close()


@pytest.fixture
def repo(tmp_path):
    repo, _ = make({"location": str(tmp_path / "repo")})
    yield repo
    repo.close()


def test_squash_is_refused_across_merges_tags_and_protected_branches_unless_allowed(repo):
    since = repo.resolve("main")
    repo.create_branch("side")
    write(repo, "side", "a", slice(10, 20), 2.0)
    write(repo, "main", "a", slice(0, 10), 1.0)
    merged = repo.merge("side", "main", fast_forward="never")
    tagged = write(repo, "main", "a", slice(20, 30), 3.0)
    repo.create_tag("v2", tagged)
    head = write(repo, "main", "a", slice(30, 40), 4.0)
    expected = read(repo, "main", "a")

    with pytest.raises(zl.InvalidInputError, match=f"merge commit {merged[:12]}"):
        repo.squash("main", since=since)
    with pytest.raises(zl.InvalidInputError, match="tag 'v2'"):
        repo.squash("main", since=since, allow_merges=True)
    repo.protect_branch("main", allow_direct_commits=True)
    with pytest.raises(zl.ProtectedBranchError, match="allow_squash"):
        repo.squash("main", since=since, allow_merges=True, allow_tags=True)
    assert repo.resolve("main") == head  # nothing moved by any of them

    repo.protect_branch("main", allow_direct_commits=True, allow_squash=True)
    assert repo.protected_branches()["main"]["allow_squash"] is True
    new = repo.squash("main", since=since, allow_merges=True, allow_tags=True)
    assert repo.log("main")[0].message == (
        "Squash 4 commits\n\n* a[0:10] = 1.0\n* Merge side into main\n* a[20:30] = 3.0\n"
        "* a[30:40] = 4.0"
    )
    assert repo.commit_info(new).parent_ids == (since,)
    np.testing.assert_array_equal(read(repo, "main", "a"), expected)
    assert repo.resolve("v2") == tagged  # the tag keeps its commit
    np.testing.assert_array_equal(read(repo, "v2", "a")[20:30], np.full(10, 3.0))


def test_bad_squashes_name_the_problem(repo):
    first = repo.log("main")[-1].id
    head = repo.resolve("main")
    with pytest.raises(zl.InvalidInputError, match="nothing to squash"):
        repo.squash("main", since="main")
    repo.create_branch("other")
    other = write(repo, "other", "a", slice(0, 10), 1.0)
    with pytest.raises(zl.InvalidInputError, match="not in the first-parent history"):
        repo.squash("main", since=other)
    with pytest.raises(zl.NotABranchError, match="squash"):
        repo.create_tag("t1", head)
        repo.squash("t1", since=first)
    with pytest.raises(zl.NotFoundError):
        repo.squash("main", since="no-such-ref")
    assert repo.resolve("main") == head


def test_a_commit_landing_during_a_squash_makes_it_fail_and_change_nothing(repo):
    since = repo.resolve("main")
    write(repo, "main", "a", slice(0, 10), 1.0)
    head, version = repo._context.refs.require("branch", "main")
    plan = squashed(repo._context.objects, "main", head, since)
    landed = write(repo, "main", "a", slice(10, 20), 2.0)  # between plan and swap
    objects, refs = repo._context.objects, repo._context.refs
    with pytest.raises(zl.BranchMovedError, match="moved to"):
        squash(objects, refs, "main", plan, version, "squash", None, lambda new: None)
    assert repo.resolve("main") == landed
    assert read(repo, "main", "a")[10:20].tolist() == [2.0] * 10


def test_a_session_based_on_a_squashed_commit_cannot_commit(repo):
    since = repo.resolve("main")
    write(repo, "main", "a", slice(0, 10), 1.0)
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[10:20] = 2.0
    write(repo, "main", "a", slice(20, 30), 3.0)
    repo.squash("main", since=since)
    with pytest.raises(zl.ConflictError) as e:
        s.commit("based on a squashed commit")
    assert e.value.conflicts[0].kind == zl.ConflictKind.RESET
    s.abandon()


def test_the_squash_command(repo, tmp_path):
    where = str(tmp_path / "repo")
    since = repo.resolve("main")
    for i in range(3):
        write(repo, "main", "a", slice(0, 10), float(i))
    out = ok("-r", where, "squash", "main", "--since", since[:12], "-m", "three writes")
    assert f"main: squashed {since[:12]}.." in out.stdout
    assert [c.message for c in repo.log("main")][:2] == ["three writes", "create a"]
    assert "nothing to squash" in fails("-r", where, "squash", "main", "--since", "main")
    doc = ok("-r", where, "squash", "main", "--since", since, "--json").json()
    assert doc["since"] == since and doc["previous"] != doc["commit"]
