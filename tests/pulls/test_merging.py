"""Merging a pull request on each metastore: checks guarding the target block it (worked
out for the source's current head), a conflicting merge leaves it open, merges racing in
real processes land once, and a merger killed at each step leaves a record that recovers
(finished as merged if its merge landed, else open again, also after its lease)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import zarrlake as zl
from tests.pulls import workers
from tests.pulls.conftest import row_values, write_row
from zarrlake._util import runtime
from zarrlake.checks import ValueRange
from zarrlake.vc.pulls import MERGE_LEASE

ROOT = Path(__file__).resolve().parents[2]
FORK = multiprocessing.get_context("fork")


def merges_of(repo: zl.Repo, source_head: str) -> list[str]:
    """The commits on main's first-parent history that merged `source_head`."""
    return [c.id for c in repo.log("main") if source_head in c.parent_ids[1:]]


def test_checks_guarding_the_target_block_until_the_source_passes(repo: zl.Repo) -> None:
    repo.add_check("t-range", ValueRange("t", min=0, max=100), branches=("main",))
    repo.add_check("elsewhere", ValueRange("t", min=0, max=1), branches=("release/*",))
    pr = repo.create_pull_request("day1", author="ingest")
    assert [(c.name, c.passed) for c in pr.run_checks()] == [("t-range", True)]

    write_row(repo, "day1", 3, 500, "a bad row")  # the source moves: checks run on its new head
    assert pr.checks == []  # reading the attribute runs nothing on the new head
    failing = pr.run_checks()
    assert [(c.name, c.passed, c.reused) for c in pr.checks] == [("t-range", False, True)]
    assert [(c.name, c.passed, c.array) for c in failing] == [("t-range", False, "t")]
    assert failing[0].commit == repo.resolve("day1") and (3, 0) in failing[0].chunks
    assert failing[0].base == repo.merge_base("main", "day1")
    with pytest.raises(zl.PullRequestBlockedError, match="check 't-range' failed") as e:
        pr.merge(by="alice")
    assert len(e.value.reasons) == 1 and pr.state == "open"
    assert isinstance(e.value, zl.ChecksFailedError)  # as a direct merge onto main raises
    assert [r.name for r in e.value.results] == ["t-range"]
    shown = pr.to_json()
    assert shown["checks"][0]["chunks"] == [[3, 0]] and shown["checks"][0]["array"] == "t"
    assert shown["blockers"] == e.value.reasons

    write_row(repo, "day1", 3, 13, "fix the bad row")
    assert [c.passed for c in pr.run_checks()] == [True] and pr.blockers() == []
    pr.merge(by="alice")
    assert row_values(repo)[1] == 11 and row_values(repo)[3] == 13


def test_a_conflicting_merge_leaves_the_pull_request_open(repo: zl.Repo) -> None:
    write_row(repo, "main", 1, 99, "main wrote row 1 too")
    main_head = repo.resolve("main")
    pr = repo.create_pull_request("day1", author="ingest")
    with pytest.raises(zl.ConflictError, match="conflict"):
        pr.merge(by="alice")
    assert pr.state == "open" and pr.refresh().state == "open"
    assert repo.resolve("main") == main_head
    write_row(repo, "day1", 1, 99, "take main's value")  # resolved on the source branch
    pr.merge(by="alice")
    assert pr.state == "merged"


def test_merges_racing_in_processes_land_once(where: dict, repo: zl.Repo) -> None:
    source_head = repo.resolve("day1")
    pr = repo.create_pull_request("day1", author="ingest")
    racers = ["alice", "bob", "carol"]
    barrier, results = FORK.Barrier(len(racers)), FORK.Queue()
    procs = [
        FORK.Process(target=workers.race, args=((where, pr.id, who, barrier, results),))
        for who in racers
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in racers]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    won = [o for o in outcomes if o[1] == "merged"]
    lost = [o for o in outcomes if o[1] != "merged"]
    assert len(won) == 1, outcomes
    assert all(o[1] == "PullRequestNotOpenError" for o in lost), outcomes
    assert merges_of(repo, source_head) == [won[0][2]] == [repo.resolve("main")]
    pr.refresh()
    assert (pr.state, pr.merge_commit, pr.merged_by) == ("merged", won[0][2], won[0][0])


def test_ids_allocated_by_processes_at_once_are_distinct(where: dict, repo: zl.Repo) -> None:
    branches = [f"day{n}" for n in range(2, 6)]
    for b in branches:
        repo.create_branch(b)
    barrier, results = FORK.Barrier(len(branches)), FORK.Queue()
    procs = [
        FORK.Process(target=workers.create, args=((where, b, barrier, results),)) for b in branches
    ]
    for p in procs:
        p.start()
    ids = sorted(results.get(timeout=120) for _ in branches)
    for p in procs:
        p.join(timeout=60)
    assert ids == [1, 2, 3, 4]
    assert {p.author for p in repo.list_pull_requests()} == set(branches)


def merger_killed_at(where: dict, pr_id: int, point: str) -> None:
    """A merger process that SIGKILLs itself at crash point `point`."""
    env = {**os.environ, "ZARRLAKE_CRASH_AT": point}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.pulls.workers", json.dumps(where), str(pr_id), "dee"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]


def test_a_merger_killed_before_merging_leaves_it_open_again(where: dict, repo: zl.Repo) -> None:
    main_head = repo.resolve("main")
    pr = repo.create_pull_request("day1", author="ingest")
    merger_killed_at(where, pr.id, "pr_after_merging")
    stuck = repo.pull_request(pr.id)
    assert stuck.state == "merging" and stuck.merge_commit is None
    assert stuck.recover().state == "open"  # its process is gone and main never moved
    assert repo.resolve("main") == main_head
    commit = stuck.merge(by="alice")
    assert stuck.state == "merged" and merges_of(repo, repo.resolve("day1")) == [commit]


def test_a_merger_killed_after_its_merge_landed_is_finished_as_merged(
    where: dict, repo: zl.Repo
) -> None:
    source_head = repo.resolve("day1")
    pr = repo.create_pull_request("day1", author="ingest")
    merger_killed_at(where, pr.id, "pr_after_merge")
    assert repo.pull_request(pr.id).state == "merging"
    landed = merges_of(repo, source_head)
    assert len(landed) == 1 and repo.resolve("main") == landed[0]
    with pytest.raises(zl.PullRequestNotOpenError, match="was merged"):
        pr.merge(by="alice")  # recovers first: the merge it finds is the one that landed
    assert (pr.state, pr.merge_commit, pr.merged_by) == ("merged", landed[0], "dee")
    assert merges_of(repo, source_head) == landed


def test_a_live_merger_holds_merging_until_its_lease_ends(repo: zl.Repo) -> None:
    from zarrlake.vc.pulls import begin_merge

    pr = repo.create_pull_request("day1", author="ingest")
    head = repo.resolve("day1")
    pr._update(lambda r: begin_merge(r, head, "eve", 0, False))  # held by this live process
    with pytest.raises(zl.PullRequestNotOpenError, match="being merged"):
        pr.merge(by="alice")
    with pytest.raises(zl.PullRequestNotOpenError, match="being merged"):
        pr.close()
    later = runtime.Runtime(now=lambda: runtime.REAL.now() + MERGE_LEASE + 1)
    token = runtime.use(later)
    try:
        assert pr.recover().state == "open"
    finally:
        runtime.reset(token)
    pr.merge(by="alice")
    assert pr.state == "merged"


def test_a_merge_whose_target_moved_after_its_checks_reruns_them_on_the_merged_result(
    where: dict, repo: zl.Repo
) -> None:
    """The checks pass on the source and on the target's new commit alone, but not on
    the two merged: the merge, paused in its own process after checking the source while
    this process commits to the target, is refused and leaves the target where it was."""
    import numpy as np
    import zarr

    from zarrlake.checks import Monotonic

    s = repo.create_session()
    zarr.create_array(s.store, name="time", shape=(8,), chunks=(1,), dtype="f8")[:] = np.arange(8)
    s.commit("a time axis")
    repo.create_branch("day2")
    s = repo.create_session("day2")
    zarr.open_array(s.store, path="time", mode="r+")[3] = 3.5
    s.commit("time 3 -> 3.5")
    repo.add_check("mono", Monotonic("time"), branches=("main",))
    pr = repo.create_pull_request("day2", author="ingest")
    assert [(c.name, c.passed) for c in pr.run_checks()] == [("mono", True)]

    ready, go, results = FORK.Event(), FORK.Event(), FORK.Queue()
    proc = FORK.Process(target=workers.merge_paused, args=((where, pr.id, ready, go, results),))
    proc.start()
    assert ready.wait(timeout=120)
    s = repo.create_session("main")
    zarr.open_array(s.store, path="time", mode="r+")[4] = 3.2  # 3 < 3.2 < 5: it passes alone
    moved = s.commit("time 4 -> 3.2")
    go.set()
    outcome = results.get(timeout=120)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert outcome[0] == "ChecksFailedError", outcome
    [(name, commit, base, chunks)] = outcome[2]
    assert (name, base) == ("mono", moved) and [3] in chunks  # on the merged result
    assert commit not in (moved, repo.resolve("day2"))
    assert repo.resolve("main") == moved
    assert pr.refresh().state == "open" and pr.merge_commit is None
