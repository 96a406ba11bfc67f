"""Pull request records on each metastore: open -> merged, open -> closed -> open again,
comments and reviews as stored, and bad input named."""

from __future__ import annotations

import json

import pytest

import zarrlake as zl
from tests.pulls.conftest import row_values, write_row
from zarrlake._util import runtime


def test_open_then_merged_with_one_merge_commit(where: dict, repo: zl.Repo) -> None:
    source_head, main_head = repo.resolve("day1"), repo.resolve("main")
    pr = repo.create_pull_request(
        "day1", "main", title="Day 1", description="rows of day 1", author="ingest"
    )
    assert (pr.id, pr.state, pr.source, pr.target) == (1, "open", "day1", "main")
    assert (pr.title, pr.description, pr.author) == ("Day 1", "rows of day 1", "ingest")
    assert pr.created == pr.updated and pr.merge_commit is None
    assert [p.id for p in repo.list_pull_requests()] == [1]

    commit = pr.merge(by="alice")
    assert pr.state == "merged" and pr.merge_commit == commit and pr.merged_by == "alice"
    assert repo.resolve("main") == commit
    info = repo.commit_info(commit)
    assert info.parent_ids == (main_head, source_head) or list(info.parent_ids) == [
        main_head,
        source_head,
    ]
    assert info.message.startswith("Merge pull request #1 from day1") and info.author == "alice"
    assert row_values(repo)[1] == 11

    again = zl.Repo.open(**where)  # another client reads the same record
    seen = again.pull_request(1)
    assert (seen.state, seen.merge_commit, seen.merged_by) == ("merged", commit, "alice")
    assert again.list_pull_requests() == []
    assert [p.id for p in again.list_pull_requests("merged")] == [1]
    with pytest.raises(zl.PullRequestNotOpenError, match="was merged"):
        seen.merge(by="bob")
    assert repo.resolve("main") == commit
    again.close()


def test_close_refuses_merge_and_reviews_until_reopened(repo: zl.Repo) -> None:
    pr = repo.create_pull_request("day1", title="Day 1", author="ingest")
    pr.close(by="alice")
    assert pr.state == "closed"
    assert [p.id for p in repo.list_pull_requests("closed")] == [pr.id]
    assert repo.list_pull_requests("open") == []
    for action in (lambda: pr.merge(by="alice"), lambda: pr.approve(by="bob"), pr.close):
        with pytest.raises(zl.PullRequestNotOpenError, match="closed"):
            action()
    pr.comment("closing: wrong day", by="alice")  # comments stay allowed
    with pytest.raises(zl.PullRequestNotOpenError, match="not closed"):
        pr.reopen().reopen()
    assert pr.state == "open"
    pr.merge(by="alice")
    assert pr.state == "merged"
    with pytest.raises(zl.PullRequestNotOpenError):
        pr.reopen()


def test_comments_and_reviews_are_stored_with_who_when_and_the_head(
    where: dict, repo: zl.Repo
) -> None:
    clock = [1_900_000_000.0]
    token = runtime.use(runtime.Runtime(now=lambda: clock[0]))
    try:
        pr = repo.create_pull_request("day1", title="Day 1", author="ingest")
        clock[0] += 60
        pr.comment("looks plausible", by="alice")
        first_head = repo.resolve("day1")
        pr.request_changes(by="bob", text="row 2 is missing")
        clock[0] += 60
        second_head = write_row(repo, "day1", 2, 12, "day 1, row 2")
        pr.approve(by="bob", text="thanks")
    finally:
        runtime.reset(token)
    seen = zl.Repo.open(**where).pull_request(pr.id)
    assert [(c.text, c.by, c.time) for c in seen.comments] == [
        ("looks plausible", "alice", 1_900_000_060.0)
    ]
    assert [(r.verdict, r.by, r.head, r.text, r.time) for r in seen.reviews] == [
        ("request_changes", "bob", first_head, "row 2 is missing", 1_900_000_060.0),
        ("approve", "bob", second_head, "thanks", 1_900_000_120.0),
    ]
    assert seen.created.timestamp() == 1_900_000_000.0
    assert seen.updated.timestamp() == 1_900_000_120.0
    assert seen.approvals == ["bob"] and seen.requested_changes == []


def test_ids_are_numbers_and_bad_input_is_named(repo: zl.Repo) -> None:
    repo.create_branch("day2")
    a = repo.create_pull_request("day1")
    b = repo.create_pull_request("day2", title="Day 2")
    assert (a.id, b.id, a.title) == (1, 2, "Merge day1 into main")
    assert repo.pull_request("#2").title == repo.pull_request("2").title == "Day 2"
    with pytest.raises(zl.NotFoundError, match="no pull request #9"):
        repo.pull_request(9)
    with pytest.raises(zl.InvalidInputError, match="positive integer"):
        repo.pull_request("x1")
    with pytest.raises(zl.InvalidInputError, match="both 'main'"):
        repo.create_pull_request("main", "main")
    with pytest.raises(zl.InvalidInputError, match="no branch 'nope' or 'gone'"):
        repo.create_pull_request("nope", "gone")
    with pytest.raises(zl.InvalidInputError, match="no branch 'gone'"):
        repo.create_pull_request("day1", "gone")
    with pytest.raises(zl.PullRequestError, match="#1 of 'day1' into 'main' is open already"):
        repo.create_pull_request("day1")
    with pytest.raises(zl.InvalidInputError, match="state must be one of"):
        repo.list_pull_requests("done")
    with pytest.raises(zl.PullRequestError, match="cannot approve it"):
        repo.create_pull_request("day2", "day1", author="carol").approve(by="carol")
    with pytest.raises(zl.InvalidInputError, match="comment must not be empty"):
        a.comment("  ")
    assert [p.id for p in repo.list_pull_requests()] == [1, 2, 3]


def test_pull_requests_move_with_the_metastore(tmp_path) -> None:
    """The refs partition is copied whole, pull requests and their id counter with it."""
    repo = zl.Repo.create(tmp_path / "repo")
    repo.create_branch("day1")
    s = repo.create_session("day1")
    s.write("note.txt", b"day 1")  # any change will do
    s.commit("day 1")
    pr = repo.create_pull_request("day1", title="Day 1", author="ingest")
    pr.approve(by="alice").comment("ok", by="alice")
    target = f"sqlite:///{tmp_path / 'moved.db'}"
    repo.copy_metastore(target, switch=False)
    moved = zl.Repo.open(tmp_path / "repo", metastore=target)
    assert moved.pull_request(pr.id).to_json() == pr.to_json()
    assert moved.create_pull_request("main", "day1").id == 2
    moved.close()


def test_records_written_by_a_later_version_still_load(repo: zl.Repo) -> None:
    pr = repo.create_pull_request("day1", author="ingest")
    pr.comment("first", by="alice").approve(by="bob")
    ctx = repo._context
    doc = json.loads(ctx.meta.get(ctx.refs.partition, b"pr/1")[0])
    doc["labels"] = ["daily"]
    doc["comments"][0]["reactions"] = {"+1": 2}
    doc["reviews"][0]["signed"] = True
    ctx.meta.set(ctx.refs.partition, b"pr/1", json.dumps(doc).encode())
    seen = repo.pull_request(1)
    assert [c.text for c in seen.comments] == ["first"] and seen.approvals == ["bob"]
    seen.comment("second", by="alice")  # a later version's fields are written back as read
    stored = json.loads(ctx.meta.get(ctx.refs.partition, b"pr/1")[0])
    assert stored["labels"] == ["daily"] and len(stored["comments"]) == 2
