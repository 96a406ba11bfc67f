"""`zarrlake pr ...` in this process, on a local repository: the daily flow through the
command line, --json twins equal to the Python API, and a refused merge exiting 1 with its
reason on one line."""

from __future__ import annotations

from pathlib import Path

import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok
from tests.pulls.conftest import COLS, ROWS, row_values, write_row


def make_repo(path: Path) -> zl.Repo:
    repo = zl.Repo.create(path)
    s = repo.create_session()
    zarr.create_array(s.store, name="t", shape=(ROWS, COLS), chunks=(1, COLS), dtype="i8")
    s.commit("array t")
    repo.create_branch("day1")
    write_row(repo, "day1", 1, 11, "day 1")
    return repo


def test_the_daily_flow_through_the_command_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    r = ("-r", str(tmp_path / "repo"))
    ok(*r, "branch", "protect", "main", "--require-pull-request", "--required-approvals", "1")
    assert repo.protected_branches()["main"]["required_approvals"] == 1
    assert "require_pull_request" in fails(*r, "merge", "day1", "--target", "main")

    made = ok(*r, "pr", "create", "day1", "--target", "main", "--title", "Day 1", "--author", "bot")
    assert "Opened pull request #1" in made.stdout
    listed = ok(*r, "pr", "list", "--json").json()
    assert listed == [p.to_json(checks=False) for p in repo.list_pull_requests()]
    assert [p["title"] for p in listed] == ["Day 1"]

    refused = fails(*r, "pr", "merge", "1", "--author", "alice")
    assert refused == "pull request #1 cannot be merged: 1 approval(s) required, 0 given"
    shown = ok(*r, "pr", "show", "1").stdout
    assert "approvals: 0 of 1 required" in shown and "cannot merge:" in shown

    ok(*r, "pr", "request-changes", "#1", "--author", "bob", "--text", "units?")
    ok(*r, "pr", "comment", "1", "they are K", "--author", "bot")
    ok(*r, "pr", "approve", "1", "--author", "alice")
    assert "bob requested changes" in fails(*r, "pr", "merge", "1", "--author", "alice")
    approved = ok(*r, "pr", "approve", "1", "--author", "bob", "--json").json()
    assert [v["verdict"] for v in approved["reviews"]] == ["request_changes", "approve", "approve"]
    doc = ok(*r, "pr", "show", "1", "--json").json()
    assert doc == repo.pull_request(1).to_json()
    assert doc["blockers"] == [] and doc["approvals"] == ["alice", "bob"]
    assert [c["text"] for c in doc["comments"]] == ["they are K"]

    merged = ok(*r, "pr", "merge", "1", "--author", "alice", "--json").json()
    assert merged["state"] == "merged" and merged["merge_commit"] == repo.resolve("main")
    assert row_values(repo)[1] == 11
    assert "it was merged" in fails(*r, "pr", "merge", "1")
    assert ok(*r, "pr", "--json").json() == []
    assert [p["id"] for p in ok(*r, "pr", "list", "--state", "merged", "--json").json()] == [1]


def test_close_reopen_and_bad_input(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    r = ("-r", str(tmp_path / "repo"))
    ok(*r, "pr", "create", "day1")
    assert ok(*r, "pr", "close", "1", "--json").json()["state"] == "closed"
    assert "it is closed" in fails(*r, "pr", "merge", "1")
    assert ok(*r, "pr", "reopen", "1", "--json").json()["state"] == "open"
    assert fails(*r, "pr", "show", "7") == (
        "no pull request #7; run `zarrlake pr list` to see the open ones"
    )
    assert "positive integer" in fails(*r, "pr", "show", "seven")
    assert "no branch 'nope'" in fails(*r, "pr", "create", "nope")
    line = fails(*r, "pr", "list", "--state", "done", code=2)
    assert "Invalid value for '--state'" in line and "'merged', 'closed', 'all'" in line
    assert "Merged pull request #1" in ok(*r, "pr", "merge", "1").stdout
