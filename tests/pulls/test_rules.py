"""The target's protection rule governs its pull requests: direct merges refused under
require_pull_request, approvals required (and dismissed when the source moves, if the rule
says so), a request for changes blocking until its reviewer approves."""

from __future__ import annotations

import json

import pytest

import zarrlake as zl
from tests.pulls.conftest import row_values, write_row


def test_require_pull_request_refuses_direct_merges_only(repo: zl.Repo) -> None:
    repo.protect_branch("main", require_pull_request=True, allow_direct_commits=True)
    with pytest.raises(zl.ProtectedBranchError) as e:
        repo.merge("day1", "main")
    assert "rule 'main', require_pull_request" in str(e.value) and "pull request" in str(e.value)
    write_row(repo, "main", 5, 55, "direct commit, allowed by the rule")  # sessions: as before
    repo.merge("main", "day1")  # other branches merge as before
    pr = repo.create_pull_request("day1", author="ingest")
    commit = pr.merge(by="alice")
    assert repo.resolve("main") == commit and row_values(repo)[1] == 11

    repo.protect_branch("main")  # no direct commits: sessions refused as before
    with pytest.raises(zl.ProtectedBranchError, match="allow_direct_commits"):
        write_row(repo, "main", 6, 66, "refused")


def test_require_pull_request_refuses_a_reset_onto_an_unreviewed_head(repo: zl.Repo) -> None:
    """Moved to the source's head, a reset would be the merge without its review."""
    repo.protect_branch("main", require_pull_request=True)
    head = repo.resolve("main")
    with pytest.raises(zl.ProtectedBranchError, match="reset into it through a pull request"):
        repo.reset_branch("main", "day1")
    assert repo.resolve("main") == head
    repo.reset_branch("day1", "main")  # branches without the rule reset as before


def test_required_approvals_count_distinct_reviewers(repo: zl.Repo) -> None:
    repo.protect_branch("main", require_pull_request=True, required_approvals=2)
    assert repo.protected_branches()["main"] == {
        "allow_direct_commits": False,
        "allow_delete": False,
        "require_pull_request": True,
        "required_approvals": 2,
    }
    pr = repo.create_pull_request("day1", author="ingest")
    assert pr.required_approvals == 2
    with pytest.raises(zl.PullRequestBlockedError, match=r"2 approval\(s\) required, 0 given") as e:
        pr.merge(by="alice")
    assert e.value.reasons == ["2 approval(s) required, 0 given"]
    pr.approve(by="alice").approve(by="alice")
    assert pr.approvals == ["alice"]
    with pytest.raises(zl.PullRequestBlockedError, match="1 given: alice"):
        pr.merge(by="alice")
    assert pr.state == "open" and repo.list_branches()["main"] != repo.resolve("day1")
    pr.approve(by="bob")
    pr.merge(by="bob")
    assert pr.state == "merged"


@pytest.mark.parametrize("dismiss", [False, True])
def test_approvals_of_an_older_head_stay_unless_the_rule_dismisses_them(
    repo: zl.Repo, dismiss: bool
) -> None:
    repo.protect_branch("main", required_approvals=1, dismiss_stale_approvals=dismiss)
    pr = repo.create_pull_request("day1", author="ingest")
    pr.approve(by="alice")
    assert pr.approvals == ["alice"]
    write_row(repo, "day1", 2, 12, "late row")  # the source moves after the approval
    if not dismiss:
        assert pr.approvals == ["alice"]
        pr.merge(by="alice")
        assert row_values(repo)[1:3] == [11, 12]
        return
    assert pr.approvals == []
    with pytest.raises(zl.PullRequestBlockedError, match="approvals of an older head"):
        pr.merge(by="alice")
    pr.approve(by="alice")  # approving the new head counts again
    assert pr.approvals == ["alice"]
    pr.merge(by="alice")
    assert row_values(repo)[1:3] == [11, 12]


def test_request_changes_blocks_until_that_reviewer_approves(repo: zl.Repo) -> None:
    pr = repo.create_pull_request("day1", author="ingest")
    pr.request_changes(by="bob", text="units are wrong")
    pr.approve(by="alice")
    with pytest.raises(zl.PullRequestBlockedError) as e:
        pr.merge(by="alice")
    assert e.value.reasons == ["bob requested changes (they must approve before it merges)"]
    assert pr.requested_changes == ["bob"] and pr.blockers() == e.value.reasons
    pr.comment("fixed", by="ingest")
    with pytest.raises(zl.PullRequestBlockedError):  # a comment lifts nothing
        pr.merge(by="alice")
    pr.approve(by="bob")
    assert pr.requested_changes == [] and pr.blockers() == []
    pr.merge(by="alice")
    assert pr.state == "merged"


def test_rules_stored_before_pull_requests_load_and_new_ones_keep_old_fields(
    repo: zl.Repo,
) -> None:
    ctx = repo._context
    old = {"pattern": "release/*", "allow_direct_commits": True, "allow_delete": False}
    ctx.meta.set(ctx.refs.partition, b"protect/release/*", json.dumps(old).encode())
    assert repo.protected_branches() == {
        "release/*": {"allow_direct_commits": True, "allow_delete": False}
    }
    repo.create_branch("release/1")
    repo.merge("day1", "release/1")  # an old rule requires no pull request
    repo.protect_branch("main", required_approvals=1)
    stored = json.loads(ctx.meta.get(ctx.refs.partition, b"protect/main")[0])
    assert stored == {
        "pattern": "main",
        "allow_direct_commits": False,
        "allow_delete": False,
        "required_approvals": 1,
    }
    with pytest.raises(zl.InvalidInputError, match="required_approvals"):
        repo.protect_branch("main", required_approvals=-1)
