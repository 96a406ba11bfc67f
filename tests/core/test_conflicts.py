"""Every conflict rule of DESIGN.md through the public API: what conflicts, what rebases and
lands, the resolution policies, and what a failed commit leaves behind."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.errors import TransientError
from zarrlake.metastore.base import Item, MetaStore


@pytest.fixture
def base(repo: zl.Repo) -> zl.Repo:
    """main holds array x (40 int32 in chunks of 10, all 0) and group g with array g/a."""
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    root.create_array("x", shape=(40,), chunks=(10,), dtype="i4", fill_value=-1)[:] = 0
    root.create_group("g").create_array("a", shape=(4,), chunks=(2,), dtype="i4")[:] = 0
    s.commit("base")
    return repo


def arr(session: zl.Session, path: str = "x") -> zarr.Array:
    return zarr.open_array(session.store, path=path)


def head(repo: zl.Repo, path: str = "x") -> np.ndarray:
    return zarr.open_array(repo.readonly_session("main").store, path=path, mode="r")[:]


def land_other_side(repo: zl.Repo, change) -> str:
    """Commit `change(session)` on main from a session of its own; returns the commit id."""
    s = repo.create_session()
    change(s)
    return s.commit("the other side")


def rewrite_doc(session: zl.Session, path: str, **fields) -> None:
    """Replace fields of an array's zarr.json directly (e.g. its chunk grid or dtype)."""
    doc = json.loads(session.read(f"{path}/zarr.json"))
    doc.update(fields)
    session.write(f"{path}/zarr.json", json.dumps(doc).encode())


def conflict_of(session: zl.Session, **kwargs) -> list[tuple[str, str, list | None]]:
    """Commit, expecting a ConflictError; check what it leaves behind; return the conflicts."""
    repo = zl.Repo.of(session)
    before = repo.resolve("main")
    staged = session.changes()
    with pytest.raises(zl.ConflictError) as e:
        session.commit("ours", **kwargs)
    assert repo.resolve("main") == before, "a failed commit must leave the branch untouched"
    assert session.state == "open"
    assert session.changes() == staged, "the session keeps its staged changes"
    return [(c.path, c.kind, c.chunks) for c in e.value.conflicts]


# write-write rules --------------------------------------------------------------------


def test_same_chunk_written_on_both_sides(base):
    ours = base.create_session()
    arr(ours)[5] = 1  # chunk 0
    arr(ours)[25] = 1  # chunk 2
    arr(ours)[15] = 1  # chunk 1: only ours

    def theirs(s):
        arr(s)[7] = 2
        arr(s)[26] = 2
        arr(s)[35] = 2  # chunk 3: only theirs

    land_other_side(base, theirs)
    assert conflict_of(ours) == [("x", "chunk", [(0,), (2,)])]
    # still reads its own staged data, and the other side's commit is what main holds
    np.testing.assert_array_equal(arr(ours)[[5, 15, 25, 35]], [1, 1, 1, 0])
    np.testing.assert_array_equal(head(base)[[5, 7, 15, 35]], [0, 2, 0, 2])


def test_chunk_deleted_on_one_side_written_on_the_other(base):
    ours = base.create_session()
    ours.delete("x/c/1")
    land_other_side(base, lambda s: arr(s).__setitem__(12, 3))
    assert conflict_of(ours) == [("x", "chunk", [(1,)])]
    assert arr(ours)[12] == -1  # our delete is still staged: the fill value shows


def test_every_conflicting_path_is_named(base):
    ours = base.create_session()
    arr(ours)[0] = 1
    arr(ours, "g/a")[3] = 1

    def theirs(s):
        arr(s)[1] = 2
        arr(s, "g/a")[2] = 2

    land_other_side(base, theirs)
    assert conflict_of(ours) == [("g/a", "chunk", [(1,)]), ("x", "chunk", [(0,)])]


def test_same_node_metadata_changed_on_both_sides(base):
    ours = base.create_session()
    arr(ours).attrs["units"] = "K"
    land_other_side(base, lambda s: arr(s).attrs.__setitem__("units", "degC"))
    assert conflict_of(ours) == [("x", "metadata", None)]


def test_attrs_on_one_side_chunks_on_the_other_land(base):
    ours = base.create_session()
    arr(ours).attrs["units"] = "K"
    land_other_side(base, lambda s: arr(s).__setitem__(slice(0, 10), 4))
    ours.commit("attrs")
    got = zarr.open_array(base.readonly_session("main").store, path="x", mode="r")
    assert got.attrs["units"] == "K"
    np.testing.assert_array_equal(got[:10], 4)


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (lambda s: arr(s).resize((60,)), "resized"),
        (lambda s: arr(s).resize((20,)), "resized"),
        (
            lambda s: rewrite_doc(
                s, "x", chunk_grid={"name": "regular", "configuration": {"chunk_shape": [20]}}
            ),
            "metadata",
        ),
        (lambda s: rewrite_doc(s, "x", data_type="int64"), "metadata"),
        (lambda s: s.delete_many(s.list_prefix("x/")), "deleted"),
    ],
    ids=["grown", "shrunk", "rechunked", "retyped", "deleted"],
)
def test_chunks_written_into_an_array_whose_structure_changed(base, change, kind):
    ours = base.create_session()
    arr(ours)[31] = 9  # chunk 3
    land_other_side(base, change)
    conflicts = conflict_of(ours)
    assert ("x", kind, [(3,)]) in conflicts, conflicts


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (lambda s: arr(s).resize((60,)), "resized"),
        (lambda s: rewrite_doc(s, "x", data_type="int16"), "metadata"),
        (lambda s: s.delete_many(s.list_prefix("x/")), "deleted"),
    ],
    ids=["resized", "retyped", "deleted"],
)
def test_structure_change_after_chunks_landed_on_the_other_side(base, change, kind):
    ours = base.create_session()
    change(ours)
    land_other_side(base, lambda s: arr(s).__setitem__(31, 9))
    conflicts = conflict_of(ours)
    assert any(p == "x" and k == kind for p, k, _ in conflicts), conflicts


def test_node_created_on_both_sides(base):
    def create_y(dtype: str):
        return lambda s: zarr.open_group(s.store, mode="a").create_array(
            "y", shape=(4,), chunks=(2,), dtype=dtype
        )

    ours = base.create_session()
    create_y("u1")(ours)
    land_other_side(base, create_y("i8"))
    assert ("y", "created", None) in conflict_of(ours)


def test_metadata_changed_alike_on_both_sides_is_no_conflict(base):
    """The same array created and the same attributes set on both sides: the session
    rebases and lands. Chunks written alike still conflict (two read-modify-writes that
    computed the same bytes would otherwise lose an update)."""

    def change(s):
        zarr.open_group(s.store, mode="a").create_array("y", shape=(4,), chunks=(2,), dtype="u1")
        arr(s).attrs["units"] = "K"

    ours = base.create_session()
    change(ours)
    arr(ours)[10:20] = 8
    land_other_side(base, lambda s: (change(s), arr(s).__setitem__(slice(0, 10), 7)))
    ours.commit("alike")
    np.testing.assert_array_equal(head(base)[:20], [7] * 10 + [8] * 10)
    assert zarr.open_array(base.readonly_session().store, path="x").attrs["units"] == "K"
    assert [c.message for c in base.log()][:3] == ["alike", "the other side", "base"]

    again = base.create_session()
    arr(again)[0:10] = 5
    land_other_side(base, lambda s: arr(s).__setitem__(slice(0, 10), 5))
    assert conflict_of(again) == [("x", "chunk", [(0,)])]


def test_a_document_rebased_alike_is_no_change_of_the_landed_commit(base):
    """A session that set the attributes the other side set first rebases and lands; its
    commit changed no document there: a serializable session that read the document at
    the other side's commit sees no conflict with it, and the path's log leaves it out."""
    units = lambda s: arr(s, "g/a").attrs.__setitem__("units", "K")  # noqa: E731
    first = base.create_session()
    units(first)
    arr(first)[0:10] = 1
    land_other_side(base, units)
    reader = base.create_session(isolation="serializable")
    assert arr(reader, "g/a").attrs["units"] == "K"
    arr(reader)[20:30] = 3
    first.commit("alike, rebased")
    reader.commit("read a document nobody changed since")
    np.testing.assert_array_equal(head(base), [1] * 10 + [0] * 10 + [3] * 10 + [0] * 10)
    assert [c.message for c in base.log(path="g")] == ["the other side", "base"]


def test_delete_of_a_group_whose_child_changed(base):
    ours = base.create_session()
    ours.delete_many(ours.list_prefix("g/"))
    land_other_side(base, lambda s: arr(s, "g/a").attrs.__setitem__("note", "changed"))
    assert ("g/a", "deleted", None) in conflict_of(ours)


def test_change_of_a_node_deleted_on_the_other_side(base):
    ours = base.create_session()
    arr(ours).attrs["units"] = "K"
    arr(ours)[0] = 1
    land_other_side(base, lambda s: s.delete_many(s.list_prefix("x/")))
    conflicts = conflict_of(ours)
    assert ("x", "deleted", [(0,)]) in conflicts, conflicts
    assert ("x", "metadata", None) in conflicts, conflicts


def test_non_overlapping_writes_to_one_array_rebase_and_land(base):
    start = base.resolve("main")
    ours = base.create_session()
    arr(ours)[0:10] = 1
    arr(ours)[20:30] = 1
    other = land_other_side(base, lambda s: arr(s).__setitem__(slice(10, 20), 2))
    cid = ours.commit("disjoint")
    log = base.log("main")
    assert [c.id for c in log[:3]] == [cid, other, start]
    assert log[0].parent_ids == (other,)
    np.testing.assert_array_equal(head(base), [1] * 10 + [2] * 10 + [1] * 10 + [0] * 10)


# resolution policies -----------------------------------------------------------------


def test_on_conflict_ours_keeps_our_chunks(base):
    ours = base.create_session()
    arr(ours)[0:10] = 1  # conflicts
    arr(ours)[20:30] = 1  # does not

    def theirs(s):
        arr(s)[0:10] = 2
        arr(s)[30:40] = 2

    land_other_side(base, theirs)
    ours.commit("ours wins", on_conflict="ours")
    np.testing.assert_array_equal(head(base), [1] * 10 + [0] * 10 + [1] * 10 + [2] * 10)


def test_on_conflict_theirs_keeps_their_chunks(base):
    ours = base.create_session()
    arr(ours)[0:10] = 1
    arr(ours)[20:30] = 1

    def theirs(s):
        arr(s)[0:10] = 2
        arr(s)[30:40] = 2

    land_other_side(base, theirs)
    ours.commit("theirs win", on_conflict="theirs")
    np.testing.assert_array_equal(head(base), [2] * 10 + [0] * 10 + [1] * 10 + [2] * 10)


@pytest.mark.parametrize("policy", ["ours", "theirs"])
def test_metadata_conflicts_fail_even_with_a_policy(base, policy):
    ours = base.create_session()
    arr(ours)[0] = 1
    arr(ours).attrs["units"] = "K"

    def theirs(s):
        arr(s)[0] = 2
        arr(s).attrs["units"] = "degC"

    land_other_side(base, theirs)
    conflicts = conflict_of(ours, on_conflict=policy)
    assert ("x", "metadata", None) in conflicts
    assert ("x", "chunk", [(0,)]) in conflicts


def test_unknown_policy_is_refused(base):
    s = base.create_session()
    arr(s)[0] = 1
    with pytest.raises(ValueError, match="on_conflict"):
        s.commit("?", on_conflict="mine")
    assert s.state == "open"


def test_retry_after_a_conflict_from_a_new_session_lands(base):
    ours = base.create_session()
    arr(ours)[0] = 1
    other = land_other_side(base, lambda s: arr(s).__setitem__(0, 2))
    conflict_of(ours)
    ours.abandon()
    again = base.create_session()
    arr(again)[0] = 1
    cid = again.commit("retry")
    assert base.log("main")[0].parent_ids == (other,)
    assert base.resolve("main") == cid and head(base)[0] == 1


# a lost response of the branch compare-and-swap ----------------------------------------


class LoseBranchCasResponse(MetaStore):
    """Passes everything to `inner`; the first `times` branch compare-and-swaps run, and then
    their caller gets a TransientError as if the reply had been lost."""

    def __init__(self, inner: MetaStore, times: int = 1) -> None:
        self.inner = inner
        self.url = inner.url
        self.times = times
        self.lost = 0

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        return self.inner.get(partition, key)

    def scan(self, partition, start=b"", prefix=None, limit=None) -> Iterator[Item]:
        return self.inner.scan(partition, start, prefix, limit)

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        return self.inner.set(partition, key, value)

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        self.inner.set_many(partition, items)

    def delete(self, partition: str, key: bytes) -> None:
        self.inner.delete(partition, key)

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        version = self.inner.set_if(partition, key, value, expected)
        if key.startswith(b"branch/") and expected is not None and self.lost < self.times:
            self.lost += 1
            raise TransientError("injected: the branch CAS landed but its reply was lost")
        return version

    def delete_if(self, partition: str, key: bytes, expected: int) -> None:
        self.inner.delete_if(partition, key, expected)

    def write_if(self, partition: str, writes, checks) -> list[int]:
        batch = list(writes)
        versions = self.inner.write_if(partition, batch, checks)
        moves = [k for k, _ in batch if k.startswith(b"branch/") and checks.get(k) is not None]
        if moves and self.lost < self.times:  # a branch compare-and-swap (vc/refs.py)
            self.lost += 1
            raise TransientError("injected: the branch CAS landed but its reply was lost")
        return versions

    def clock(self) -> float:
        return self.inner.clock()

    def drop_partition(self, partition: str) -> None:
        self.inner.drop_partition(partition)


def _commit_with_lost_cas_reply(repo: zl.Repo, wrapper_above_retries: bool) -> None:
    s = repo.create_session()
    arr(s)[0:10] = 5
    start = repo.resolve("main")
    if wrapper_above_retries:  # the commit itself sees the error
        faulty = LoseBranchCasResponse(repo._context.refs.meta)
        repo._context.refs.meta = faulty
    else:  # the retrying metastore sees it and retries
        faulty = LoseBranchCasResponse(repo._context.meta.inner)
        repo._context.meta.inner = faulty
    cid = s.commit("reply lost")
    assert faulty.lost == 1
    assert repo.resolve("main") == cid
    assert [c.id for c in repo.log("main")[:2]] == [cid, start]
    assert s.state == "committed"
    np.testing.assert_array_equal(head(repo)[:10], 5)


def test_lost_branch_cas_reply_below_the_retries_is_a_success(base):
    _commit_with_lost_cas_reply(base, wrapper_above_retries=False)


def test_lost_branch_cas_reply_seen_by_the_commit_is_a_success(base):
    _commit_with_lost_cas_reply(base, wrapper_above_retries=True)


def test_lost_reply_on_a_rebased_commit_is_a_success(base):
    """The branch moved, we rebased, and the CAS of the rebased commit lost its reply."""
    s = base.create_session()
    arr(s)[0:10] = 5
    other = land_other_side(base, lambda o: arr(o).__setitem__(slice(30, 40), 6))
    faulty = LoseBranchCasResponse(base.context.refs.meta)
    base.context.refs.meta = faulty
    cid = s.commit("rebased, reply lost")
    assert faulty.lost == 1
    assert base.log("main")[0].id == cid
    assert base.log("main")[0].parent_ids == (other,)
    np.testing.assert_array_equal(head(base), [5] * 10 + [0] * 20 + [6] * 10)


def test_lost_replies_throughout_the_metastore_never_make_a_false_conflict(base):
    """Seeded faults below the retries: operations fail, or run and lose their reply. Every
    commit (half of them rebased over the other half) reports success and lands once."""
    from zarrlake.testing.faults import FaultyMetaStore

    start = base.resolve("main")
    faulty = FaultyMetaStore(
        base.context.meta.inner, seed=7, error_rate=0.05, lost_response_rate=0.2
    )
    base.context.meta.inner = faulty
    landed = []
    for round_ in range(8):
        first, second = base.create_session(), base.create_session()
        arr(first)[round_ % 4 * 10] = round_ + 1  # chunk round_ % 4
        arr(second)[(round_ + 2) % 4 * 10 + 5] = round_ + 1  # another chunk
        landed += [first.commit(f"first {round_}"), second.commit(f"second {round_}")]
    assert faulty.responses_lost > 0 and faulty.errors_injected > 0
    base.context.meta.inner = faulty.inner
    log = base.log("main")
    assert [c.id for c in log[:16]] == landed[::-1]
    assert log[16].id == start
    expected = np.zeros(40)
    for round_ in range(8):
        expected[[round_ % 4 * 10, (round_ + 2) % 4 * 10 + 5]] = round_ + 1
    np.testing.assert_array_equal(head(base), expected)
