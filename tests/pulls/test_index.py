"""One open pull request per (source, target), found through an index record under
compare-and-swap (not by scanning every open pull request): processes creating the same
one at once get one pull request, a creator that died between claiming the pair and
writing its record does not block the pair, repositories from before the index are
indexed once, and reopening is refused while another pull request holds the pair."""

from __future__ import annotations

import multiprocessing

import pytest

import zarrlake as zl
from tests.pulls import workers
from tests.pulls.conftest import write_row
from zarrlake.pulls import records_of
from zarrlake.vc import pulls as records

FORK = multiprocessing.get_context("fork")


def test_processes_creating_the_same_pull_request_at_once_get_one(
    where: dict, repo: zl.Repo
) -> None:
    racers = 4
    barrier, results = FORK.Barrier(racers), FORK.Queue()
    procs = [
        FORK.Process(target=workers.create_same, args=((where, "day1", barrier, results),))
        for _ in range(racers)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(racers)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    created = [o[1] for o in outcomes if o[0] == "created"]
    assert len(created) == 1, outcomes
    assert all(
        o[0] == "PullRequestExistsError" and "open already" in o[1]
        for o in outcomes
        if o[0] != "created"
    )
    assert [p.id for p in repo.list_pull_requests("open")] == created
    assert records_of(repo).holder("day1", "main") == created[0]


def test_a_closed_or_merged_holder_frees_the_pair(repo: zl.Repo) -> None:
    first = repo.create_pull_request("day1")
    with pytest.raises(zl.PullRequestError, match=f"#{first.id} .* open already"):
        repo.create_pull_request("day1")
    first.close()
    second = repo.create_pull_request("day1")
    assert records_of(repo).holder("day1", "main") == second.id
    with pytest.raises(zl.PullRequestError, match=f"#{second.id} of 'day1' into 'main' is open"):
        first.reopen()
    assert first.refresh().state == "closed"
    second.merge()
    write_row(repo, "day1", 2, 12, "day 1, more")
    third = repo.create_pull_request("day1")
    assert third.id == second.id + 1 and third.state == "open"


def test_a_creator_that_died_after_claiming_the_pair_does_not_block_it(repo: zl.Repo) -> None:
    prs = records_of(repo)
    prs.index_old()
    claim = b'{"id": 7, "source": "day1", "target": "main"}'  # its record never written
    repo._context.meta.set(repo._context.refs.partition, records.index_key("day1", "main"), claim)
    pr = repo.create_pull_request("day1")
    assert pr.state == "open" and prs.holder("day1", "main") == pr.id
    got = repo._context.meta.get(repo._context.refs.partition, b"pr/7")
    assert got is not None and got[0] == records.VOID  # the dead creator's write now fails
    with pytest.raises(zl.NotFoundError, match="no pull request #7"):
        repo.pull_request(7)
    assert [p.id for p in repo.list_pull_requests(None)] == [pr.id]


def test_a_repository_from_before_the_index_is_indexed_once(repo: zl.Repo) -> None:
    old = repo.create_pull_request("day1")
    repo.create_branch("day2")
    meta, part = repo._context.meta, repo._context.refs.partition
    for key, _, _ in list(meta.scan(part, prefix=b"pr-")):  # as an older version left it
        if key != records.SEQ_KEY:
            meta.delete(part, key)
    assert meta.get(part, records.INDEXED) is None
    with pytest.raises(zl.PullRequestError, match=f"#{old.id} .* open already"):
        repo.create_pull_request("day1")
    assert meta.get(part, records.INDEXED) is not None
    assert records_of(repo).holder("day1", "main") == old.id
    assert repo.create_pull_request("day2").id == old.id + 1
