"""Checks guarding a branch refuse commits, merges, reverts and resets that fail them,
leaving the branch untouched (a session stays open to fix and commit again), on every
metastore; a commit rebuilt on a moved head is checked again; results are recorded per
(commit, base) and never count for another commit."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.checks.conftest import ROWS, write
from tests.core.counting import counted
from tests.helpers.chunks import zstd_chunk
from zarrlake.checks import MaxChangedChunks, Monotonic, ValueRange


def test_a_failing_commit_is_refused_and_the_session_stays_open(where):
    repo = zl.Repo.open(**where)
    repo.add_check("t-range", ValueRange("t", 0, 50))
    head = repo.resolve("main")
    s = write(repo, t={2: 99.0, 5: 70.0, 6: 3.0})
    with pytest.raises(zl.ChecksFailedError) as info:
        s.commit("bad day")
    text = str(info.value)
    assert "'t-range'" in text and "'t'" in text and "(2, 0), (5, 0)" in text
    assert [r.name for r in info.value.results] == ["t-range"]
    assert info.value.results[0].failing == 2
    assert repo.resolve("main") == head  # untouched
    assert s.state == "open"
    zarr.open_group(s.store)["t"][2] = 20.0  # fix, commit again
    zarr.open_group(s.store)["t"][5] = 21.0
    cid = s.commit("fixed day")
    assert repo.resolve("main") == cid
    assert zarr.open_array(repo.readonly_session().store, path="t")[5, 0] == 21.0


def test_a_failing_merge_is_refused(where):
    repo = zl.Repo.open(**where)
    repo.create_branch("day")
    write(repo, "day", t={1: 99.0}).commit("day 1, wrong")
    repo.add_check("t-range", ValueRange("t", 0, 50), branches=("main", "release/*"))
    head = repo.resolve("main")
    with pytest.raises(zl.ChecksFailedError, match=r"merge .* 't-range'.*chunk \(1, 0\)"):
        repo.merge("day", "main")  # a fast-forward: checked on the whole range merged
    with pytest.raises(zl.ChecksFailedError):
        repo.merge("day", "main", fast_forward="never")
    assert repo.resolve("main") == head
    write(repo, "day", t={1: 9.0}).commit("day 1, fixed")
    merged = repo.merge("day", "main")
    assert repo.resolve("main") == merged


def test_revert_and_reset_onto_a_guarded_branch_are_checked(repo):
    bad = write(repo, t={3: 80.0}).commit("before the check")
    good = write(repo, t={3: 5.0}).commit("fix")
    repo.add_check("t-range", ValueRange("t", 0, 50))
    with pytest.raises(zl.ChecksFailedError, match="revert"):
        repo.revert(good)  # back to 80
    with pytest.raises(zl.ChecksFailedError, match="reset"):
        repo.reset_branch("main", bad)
    assert repo.resolve("main") == good
    repo.create_branch("scratch", at=good)
    assert repo.reset_branch("scratch", bad) == bad  # not guarded


def test_checks_guard_only_the_branches_they_name(repo):
    repo.add_check("t-range", ValueRange("t", 0, 50), branches=("release/*",))
    repo.create_branch("release/1")
    assert write(repo, t={0: 99.0}).commit("main is not guarded")
    with pytest.raises(zl.ChecksFailedError):
        write(repo, "release/1", t={0: 99.0}).commit("release/1 is")


def test_a_commit_rebuilt_on_a_moved_head_is_checked_again(repo, monkeypatch):
    """The check passes on the first build; another commit lands before the swap; the
    rebuilt commit fails it: the stale pass does not count."""
    repo.add_check("mono", Monotonic("time"))
    base = repo.resolve("main")
    s = write(repo, time={slice(ROWS - 2, ROWS): [10, 11]})  # after 5: increasing
    import zarrlake.txn.checks as checks

    real, moved = checks.enforce, []

    def interloper(*args: object, **kwargs: object) -> None:
        real(*args, **kwargs)  # the check passed: the interloper lands before the swap
        if not moved:
            moved.append(True)
            other = zl.Repo.open(repo.spec.location)
            rule = other.list_checks()[0]
            other.remove_check("mono")  # lands what the check would refuse, then restores it
            o = write(other, time={slice(ROWS - 4, ROWS - 2): [20, 21]})  # then 21, 10
            moved.append(o.commit("interloper"))
            other.add_check("mono", rule.check)

    monkeypatch.setattr(checks, "enforce", interloper)
    with pytest.raises(zl.ChecksFailedError, match="mono") as info:
        s.commit("last two times")
    assert repo.resolve("main") == moved[1]
    (failed,) = info.value.results
    assert failed.base == moved[1] and failed.commit != base
    first = [
        r
        for r in zl.Repo.open(repo.spec.location).context.meta.scan(
            repo._context.refs.partition, prefix=b"checkresult/"
        )
        if r[0].decode().split("/")[2] == base
    ]
    assert len(first) == 1 and b'"passed": true' in first[0][1]  # the stale pass, recorded
    assert s.state == "open"


def test_results_are_recorded_per_pair_and_never_reused_for_another_commit(repo):
    repo.add_check("t-range", ValueRange("t", 0, 50))
    one = write(repo, t={0: 3.0}).commit("one")
    (res,) = repo.run_checks(one)
    assert res.reused and res.passed and res.commit == one  # recorded when it landed
    repo.create_branch("side", at="main~1")
    two = write(repo, "side", t={0: 99.0}).commit("two, unguarded")
    (res2,) = repo.run_checks(two)
    assert not res2.reused and not res2.passed and res2.commit == two
    assert repo.run_checks(two)[0].reused
    assert not repo.run_checks(two, reuse=False)[0].reused
    assert not repo.run_checks(two, base="main")[0].reused  # another base: another pair
    repo.remove_check("t-range")
    repo.add_check("t-range", ValueRange("t", 0, 100))  # another rule: computed anew
    (res3,) = repo.run_checks(two)
    assert res3.passed and not res3.reused


def test_run_checks_runs_named_checks_whatever_branches_they_guard(repo):
    repo.add_check("a", ValueRange("t", 0, 50), branches=("nowhere",))
    repo.add_check("b", MaxChangedChunks(0), branches=("nowhere",))
    cid = write(repo, t={0: 2.0}).commit("x")
    assert [(r.name, r.passed) for r in repo.run_checks(cid)] == [("a", True), ("b", False)]
    assert [r.name for r in repo.run_checks(cid, names=["b"])] == ["b"]
    with pytest.raises(zl.NotFoundError, match="'c'"):
        repo.run_checks(cid, names=["c"])
    with pytest.raises(zl.InvalidInputError, match="no parent"):
        repo.run_checks(repo.log()[-1].id)


def test_rules_are_listed_removed_and_named_clearly(repo):
    rule = repo.add_check("t-range", ValueRange("t", 0, 50), branches="release/*")
    assert rule.branches == ("release/*",)
    assert [(r.name, r.check) for r in repo.list_checks()] == [("t-range", ValueRange("t", 0, 50))]
    with pytest.raises(zl.InvalidInputError, match="exists already"):
        repo.add_check("t-range", ValueRange("t", 0, 5))
    with pytest.raises(zl.InvalidInputError, match="check name"):
        repo.add_check("bad name", ValueRange("t", 0, 5))
    with pytest.raises(zl.InvalidInputError, match="kinds"):
        repo.add_check("x", {"kind": "value-range"})
    assert repo.protected_branches() == {}  # stored next to protection, not among it
    repo.remove_check("t-range")
    assert repo.list_checks() == []
    with pytest.raises(zl.NotFoundError, match="t-range"):
        repo.remove_check("t-range")


def test_a_check_guarding_another_branch_adds_no_metastore_round_trip(repo):
    def commit_cost(value: float) -> dict:
        r, _, meta = counted(repo)
        s = r.create_session()
        s.write("t/c/0/0", zstd_chunk(np.full(4, value).tobytes()))  # as zarr stores it
        before = dict(meta.calls)
        s.commit("one chunk")
        s.wait()  # its clean-up counts too
        return {k: v - before.get(k, 0) for k, v in meta.calls.items()}

    bare = commit_cost(2.0)
    repo.add_check("t-range", ValueRange("t", 0, 50), branches=("release/*",))
    assert commit_cost(3.0) == bare


@pytest.mark.parametrize("statistics", [True, False])
def test_checks_read_only_the_chunks_the_change_touches(tmp_path, statistics):
    repo = zl.Repo.create(tmp_path / "r", settings={"chunk_statistics": statistics})
    s = repo.create_session()
    a = zarr.create_array(s.store, name="a", shape=(2000,), chunks=(1,), dtype="f8")
    a[:] = np.arange(2000)
    s.commit("2000 chunks")
    repo.add_check("range", ValueRange("a", 0, 1e6), branches=("nowhere",))
    repo.add_check("mono", Monotonic("a"), branches=("nowhere",))

    def reads(n: int) -> tuple[int, int]:
        s = repo.create_session()
        at = 10 * n  # a fresh place each time
        zarr.open_array(s.store, path="a")[at : at + n] = np.arange(at, at + n) + 0.25
        cid = s.commit(f"{n} chunks")
        (rng,) = repo.run_checks(cid, names=["range"])
        (mono,) = repo.run_checks(cid, names=["mono"])
        assert rng.passed and mono.passed
        assert rng.chunks_from_stats == (n if statistics else 0)
        return rng.chunks_read, mono.chunks_read

    # the changed chunks (none for a value range its statistics settle); for the
    # coordinate, the elements either side of them too
    read = 0 if statistics else 1
    assert reads(1) == (read, 3)
    assert reads(10) == (10 * read, 12)
    assert reads(100) == (100 * read, 102)
