"""Moving (renaming) groups and arrays: `Session.move`, its commits, and how diffs, merges,
rebases, reverts, blame and `log --follow` treat a move. Data is checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok
from zarrlake.format import envelope
from zarrlake.format.changes import ChangeSet

N, CHUNK = 60, 10  # arrays of 6 chunks of 10 float64: 800 bytes, stored as chunk objects


def values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(N)


def make(repo_args: dict) -> zl.Repo:
    """A repository (chunks stored as objects) with group `raw` holding arrays `t` and `p`,
    and a top-level array `other`."""
    repo = zl.Repo.create(**repo_args, settings={"stage_inline_max": 0})
    s = repo.create_session()
    root = zarr.open_group(s.store)
    for path, seed in (("raw/t", 1), ("raw/p", 2), ("other", 3)):
        arr = root.create_array(path, shape=(N,), chunks=(CHUNK,), dtype="f8", compressors=None)
        arr[:] = values(seed)
    root["raw"].attrs["source"] = "station 7"
    s.commit("create raw/t, raw/p, other")
    return repo


def read(repo: zl.Repo, ref: str, path: str) -> np.ndarray:
    return zarr.open_array(repo.readonly_session(ref).store, path=path, mode="r")[:]


def nodes(repo: zl.Repo, ref: str = "main") -> list[str]:
    docs = repo.readonly_session(ref).metadata_documents()
    return sorted(k[: -len("zarr.json")].rstrip("/") for k in docs)


def chunk_objects(repo: zl.Repo) -> set[str]:
    return set(repo._context.object_store.list("chunks/"))


@pytest.fixture
def local(tmp_path) -> zl.Repo:
    repo = make({"location": str(tmp_path / "repo")})
    yield repo
    repo.close()


def test_a_move_on_every_metastore_copies_no_chunk_and_conflicts_only_under_the_old_path(
    any_metastore,
):
    """On SQLite, PostgreSQL and the bucket metastore: a group moved with everything under
    it reads back as before at its new path without a chunk object written; a session that
    began before the move and wrote under the old path conflicts, one that wrote elsewhere
    lands on top of the move."""
    repo = make(any_metastore)
    try:
        old_path = repo.create_session()  # both begin before the move
        elsewhere = repo.create_session()
        zarr.open_array(old_path.store, path="raw/t")[0:10] = -1.0
        zarr.open_array(elsewhere.store, path="other")[50:60] = 7.0
        old_path.flush()
        elsewhere.flush()
        stored = chunk_objects(repo)

        s = repo.create_session()
        zarr.open_group(s.store).create_group("archive")
        s.move("/raw", "/archive/v1")
        assert read_session(s, "archive/v1/t").tolist() == values(1).tolist()
        moved = s.commit("archive raw as v1")

        assert chunk_objects(repo) == stored  # no chunk written, none copied
        assert nodes(repo) == ["", "archive", "archive/v1", "archive/v1/p", "archive/v1/t", "other"]
        np.testing.assert_array_equal(read(repo, "main", "archive/v1/t"), values(1))
        np.testing.assert_array_equal(read(repo, "main", "archive/v1/p"), values(2))
        group = zarr.open_group(repo.readonly_session().store, path="archive/v1", mode="r")
        assert group.attrs["source"] == "station 7"

        with pytest.raises(zl.ConflictError) as e:
            old_path.commit("write under raw")
        kinds = {(c.path, c.kind) for c in e.value.conflicts}
        assert kinds == {("raw/t", zl.ConflictKind.RENAMED)}
        assert "'raw' was moved to 'archive/v1'" in str(e.value)
        assert repo.resolve("main") == moved  # nothing landed
        old_path.abandon()

        elsewhere.commit("write other")
        expected = values(3)
        expected[50:60] = 7.0
        np.testing.assert_array_equal(read(repo, "main", "other"), expected)
        np.testing.assert_array_equal(read(repo, "main", "archive/v1/t"), values(1))
        assert repo.fsck() == []
    finally:
        repo.close()


def read_session(s: zl.Session, path: str) -> np.ndarray:
    return zarr.open_array(s.store, path=path, mode="r")[:]


def test_merges_carry_a_move_and_conflict_with_writes_under_the_old_path(any_metastore):
    repo = make(any_metastore)
    try:
        base = repo.resolve("main")
        repo.create_branch("tidy", base)
        repo.create_branch("fix", base)
        repo.create_branch("more", base)
        s = repo.create_session("tidy")
        s.move("raw/t", "raw/t2m")
        s.commit("rename t to t2m")
        s = repo.create_session("fix")
        zarr.open_array(s.store, path="raw/t")[10:20] = 5.0
        s.commit("fix t")
        s = repo.create_session("more")
        zarr.open_array(s.store, path="raw/p")[0:10] = 3.0
        s.commit("more p")

        with pytest.raises(zl.ConflictError) as e:
            repo.merge("fix", "tidy")
        assert {(c.path, c.kind) for c in e.value.conflicts} == {("raw/t", zl.ConflictKind.RENAMED)}
        assert e.value.conflicts[0].chunks == [(1,)]

        # a write elsewhere merges with the move; the merge commit records the move
        into_more = repo.merge("tidy", "more")
        np.testing.assert_array_equal(read(repo, into_more, "raw/t2m"), values(1))
        p = values(2)
        p[0:10] = 3.0
        np.testing.assert_array_equal(read(repo, into_more, "raw/p"), p)
        assert nodes(repo, "more") == ["", "other", "raw", "raw/p", "raw/t2m"]
        assert repo.commit_changes(into_more).nodes_moved == {"raw/t": "raw/t2m"}
        followed = repo.log("more", path="raw/t2m", follow=True)
        assert [(c.id, c.path) for c in followed] == [
            (into_more, "raw/t2m"),
            (base, "raw/t"),
        ]
        with pytest.raises(zl.ConflictError):
            repo.merge("fix", "more")
    finally:
        repo.close()


def test_the_diff_shows_a_move_as_a_move(local):
    first = local.resolve("main")
    s = local.create_session()
    s.move("raw/t", "t2m")
    zarr.open_array(s.store, path="t2m")[20:30] = 0.5  # changed besides the move: chunk 2
    d = s.changes()
    assert d.nodes_moved == {"raw/t": "t2m"}
    assert not d.nodes_added and not d.nodes_deleted
    assert d.chunks_written == {"t2m": {(2,)}} and not d.chunks_deleted
    assert ("t2m", "moved from raw/t", 1, 0) in d.summary()
    cid = s.commit("move t out of raw")

    for diff in (local.commit_changes(cid), local.diff(first, "main")):
        assert diff.nodes_moved == {"raw/t": "t2m"}
        assert diff.chunks_written == {"t2m": {(2,)}} and not diff.chunks_deleted
        assert diff.to_json()["nodes_moved"] == {"raw/t": "t2m"}
    back = local.diff("main", first)  # from the newer to the older: the move undone
    assert back.nodes_moved == {"t2m": "raw/t"}
    assert back.chunks_written == {"raw/t": {(2,)}}
    assert "nodes_moved" not in local.diff(first, first).to_json()


def test_blame_and_log_follow_an_array_across_renames(local):
    s = local.create_session()
    zarr.open_array(s.store, path="raw/t")[10:20] = 1.0
    wrote = s.commit("write chunk 1 of raw/t")
    s = local.create_session()
    s.move("raw/t", "raw/temperature")
    s.commit("rename")
    s = local.create_session()
    zarr.open_group(s.store).create_group("final")
    s.move("raw", "final/v1")  # the group holding it
    s.commit("publish raw as final/v1")
    s = local.create_session()
    zarr.open_array(s.store, path="other")[0:10] = 0.0
    s.commit("unrelated")
    s = local.create_session()
    zarr.open_array(s.store, path="final/v1/temperature")[30:40] = 2.0
    last = s.commit("write chunk 3")

    followed = local.log("main", path="final/v1/temperature", follow=True)
    assert [(c.message, c.path) for c in followed] == [
        ("write chunk 3", "final/v1/temperature"),
        ("publish raw as final/v1", "final/v1/temperature"),
        ("rename", "raw/temperature"),
        ("write chunk 1 of raw/t", "raw/t"),
        ("create raw/t, raw/p, other", "raw/t"),
    ]
    assert [c.message for c in local.log("main", path="final/v1/temperature")] == [
        "write chunk 3",
        "publish raw as final/v1",
    ]
    assert local.blame("final/v1/temperature", (1,)).id == wrote
    assert local.blame("final/v1/temperature", (3,)).id == last
    assert local.blame("final/v1/temperature", (0,)).message == "create raw/t, raw/p, other"
    with pytest.raises(zl.InvalidInputError, match="follow"):
        local.log("main", follow=True)


def test_writes_in_the_session_around_a_move(local):
    """What the session wrote under the node before the move moves with it; writes after
    it land at the new path; the moved node reads back at once."""
    s = local.create_session()
    zarr.open_array(s.store, path="raw/p")[0:10] = 4.0  # staged, not committed
    s.move("raw/p", "pressure")
    assert not s.exists("raw/p/zarr.json")
    arr = zarr.open_array(s.store, path="pressure")
    arr[50:60] = 6.0
    assert s.list_dir("raw") == ["t", "zarr.json"]
    s.commit("move p with its new chunk")
    p = values(2)
    p[0:10], p[50:60] = 4.0, 6.0
    np.testing.assert_array_equal(read(local, "main", "pressure"), p)
    assert nodes(local) == ["", "other", "pressure", "raw", "raw/t"]
    # moved back and forth in one session: nothing left to commit
    s = local.create_session()
    s.move("pressure", "q")
    s.move("q", "pressure")
    with pytest.raises(zl.NoChangesError):
        s.commit("nothing")
    s.abandon()


def test_a_chunk_written_below_the_old_path_after_the_move_is_refused(local):
    s = local.create_session()
    worker = local.join_session(s.id)
    s.move("raw/t", "t")
    with worker:  # a worker that kept writing under the old path: its chunk has no array
        worker.write("raw/t/c/7", b"\0" * 80)
    with pytest.raises(zl.ConflictError, match="after this session moved it away"):
        s.commit("move")
    s.abandon()


def test_bad_moves_are_refused_naming_the_problem(local):
    s = local.create_session()
    zarr.open_group(s.store).create_array("a", shape=(2,), dtype="i4")
    cases = [
        ("raw", "raw/inner", zl.InvalidInputError, "into itself"),
        ("raw", "raw", zl.InvalidInputError, "to itself"),
        ("nope", "x", zl.NotFoundError, "no group or array"),
        ("raw/t", "other", zl.AlreadyExistsError, "exists already"),
        ("/", "x", zl.InvalidInputError, "root"),
        ("raw", "", zl.InvalidInputError, "root"),
        ("raw/t", "missing/t", zl.NotFoundError, "no group 'missing'"),
        ("raw/t", "other/t", zl.InvalidInputError, "is an array"),
        ("raw/t", "a/../b", zl.InvalidInputError, "invalid store key"),
        (3, "x", zl.InvalidInputError, "must be a string"),
    ]
    for src, dst, error, text in cases:
        with pytest.raises(error, match=text):
            s.move(src, dst)
    s.move("raw/t", "raw/t2")  # the session is unharmed
    s.commit("one good move")
    assert nodes(local) == ["", "a", "other", "raw", "raw/p", "raw/t2"]
    with pytest.raises(zl.ReadOnlyError):
        local.readonly_session().move("raw", "x")


def test_revert_of_a_move_moves_the_node_back(local):
    s = local.create_session()
    s.move("raw", "station")
    moved = s.commit("rename raw")
    s = local.create_session()
    zarr.open_array(s.store, path="other")[0:10] = 1.0
    s.commit("unrelated")
    reverted = local.revert(moved)
    assert local.commit_changes(reverted).nodes_moved == {"station": "raw"}
    assert nodes(local) == ["", "other", "raw", "raw/p", "raw/t"]
    np.testing.assert_array_equal(read(local, "main", "raw/t"), values(1))


def test_change_sets_without_moves_keep_their_version_1_encoding():
    keys = np.array([b"a/c/0", b"a/zarr.json"])
    ops = np.array([1, 1], np.uint8)
    plain = ChangeSet(keys, ops, {})
    oid, data = plain.encode()
    assert b'"v"' not in data and b"moves" not in data
    moved = ChangeSet(keys, ops, {}, (("x", "a"),))
    oid2, data2 = moved.encode()
    assert b'"v":2' in data2 and oid2 != oid
    assert ChangeSet.decode(oid2, data2).moves == (("x", "a"),)
    assert ChangeSet.decode(oid, data).moves == ()
    oid3, newer = envelope.encode_columns(
        envelope.KIND_CHANGES, {"nodes": {}, "v": 9}, {"keys": keys, "ops": ops}
    )
    with pytest.raises(zl.CorruptionError, match="newer than this zarrlake"):
        ChangeSet.decode(oid3, newer)


def test_the_mv_command_and_log_follow(local, tmp_path):
    where = str(tmp_path / "repo")
    out = ok("-r", where, "mv", "raw/t", "raw/t2m", "-m", "rename t").stdout
    assert "main: moved raw/t to raw/t2m" in out
    np.testing.assert_array_equal(read(local, "main", "raw/t2m"), values(1))
    log = ok("-r", where, "log", "--follow", "raw/t2m", "--json").json()
    assert [(c["message"], c["path"]) for c in log] == [
        ("rename t", "raw/t2m"),
        ("create raw/t, raw/p, other", "raw/t"),
    ]
    assert "moved from raw/t" in ok("-r", where, "show", "main").stdout
    assert "exists already" in fails("-r", where, "mv", "raw/t2m", "other")
    assert len(local.log("main")) == 3  # the refused move made no commit
