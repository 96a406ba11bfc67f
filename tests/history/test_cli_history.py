"""The history verbs through the console script's entry point (in this process): merge,
merge-base, revert, reset, log --graph, blame, branch protect/unprotect, each with --json
and one-line errors."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import fails, ok, run
from tests.helpers.history import chunk_values, commit_chunks


@pytest.fixture
def repo_path(repo):
    """main and dev diverged: dev wrote chunk 1, main wrote chunk 3; tag v0 at the start."""
    repo.create_tag("v0")
    repo.create_branch("dev")
    commit_chunks(repo, "dev", {1: 5})
    commit_chunks(repo, "main", {3: 7})
    return repo.spec.location


def js(*args: str):
    return json.loads(ok(*args, "--json").stdout)


def test_merge_log_graph_and_merge_base(repo_path, repo):
    base = js("-r", repo_path, "merge-base", "main", "dev")["merge_base"]
    assert base == repo.resolve("v0")
    before = repo.resolve("main")
    out = js(
        "-r", repo_path, "merge", "dev", "--target", "main", "-m", "merge dev", "--ff", "never"
    )
    assert out["kind"] == "merge" and out["previous"] == before
    assert out["commit"] == repo.resolve("main")
    assert chunk_values(repo, "main")[:4] == [0, 5, 0, 7]
    again = js("-r", repo_path, "merge", "dev")
    assert again["kind"] == "up to date" and again["commit"] == out["commit"]
    # first-parent log vs graph
    plain = js("-r", repo_path, "log", "main")
    graph = js("-r", repo_path, "log", "main", "--graph")
    assert plain[0]["parents"] == [before, repo.resolve("dev")]
    assert {c["id"] for c in graph} == {c["id"] for c in plain} | {repo.resolve("dev")}
    drawn = ok("-r", repo_path, "log", "main", "--graph").stdout
    assert "(merge)" in drawn and "merge dev" in drawn
    assert "|\\" in drawn.splitlines() and "\\\\" not in drawn  # one backslash, as git draws
    assert drawn.splitlines()[0].startswith("* ")
    assert js("-r", repo_path, "log", "main^2")[0]["id"] == repo.resolve("dev")


def test_merge_conflict_is_one_line_and_moves_nothing(repo_path, repo):
    commit_chunks(repo, "dev", {3: 1})
    head = repo.resolve("main")
    line = fails("-r", repo_path, "merge", "dev")
    assert "chunk conflict at 'a' chunks (3,)" in line
    assert repo.resolve("main") == head
    bad = run("-r", repo_path, "merge", "dev", "--ff", "sometimes")  # a usage error now
    assert bad.returncode == 2 and "'allow', 'never', 'only'" in bad.stderr
    assert "diverged" in fails("-r", repo_path, "merge", "dev", "--ff", "only")
    out = js("-r", repo_path, "merge", "dev", "--on-conflict", "theirs")
    assert out["kind"] == "merge"
    assert chunk_values(repo, "main")[3] == 1


def test_revert_reset_and_blame(repo_path, repo):
    bad = repo.resolve("main")
    out = js("-r", repo_path, "revert", "main", "-m", "undo")
    assert out["reverted"] == bad and out["commit"] == repo.resolve("main")
    assert chunk_values(repo, "main")[3] == 0
    line = fails("-r", repo_path, "reset", "main", "main~1", "--expected", "v0")
    assert "not the expected" in line
    assert repo.resolve("main") == out["commit"]
    moved = js("-r", repo_path, "reset", "main", "main~1", "--expected", out["commit"])
    assert moved == {"branch": "main", "commit": bad, "previous": out["commit"]}
    b = js("-r", repo_path, "blame", "a", "3")
    assert b["commit"]["id"] == bad and b["chunk"] == [3]
    assert bad[:12] in ok("-r", repo_path, "blame", "a", "3").stdout
    assert "never written" in fails("-r", repo_path, "blame", "a", "2")
    assert "no branch, tag or commit" in fails("-r", repo_path, "reset", "main", "nope")


def test_branch_protection_and_name_rules(repo_path, repo):
    assert "cannot be deleted" in fails("-r", repo_path, "branch", "delete", "main")
    assert js("-r", repo_path, "branch", "protect", "main") == {
        "main": {"allow_direct_commits": False, "allow_delete": False}
    }
    js("-r", repo_path, "branch", "protect", "rel/*", "--allow-delete")
    rules = js("-r", repo_path, "branch", "protections")
    assert set(rules) == {"main", "rel/*"} and rules["rel/*"]["allow_delete"]
    assert "rel/*" in ok("-r", repo_path, "branch", "protections").stdout
    assert js("-r", repo_path, "merge", "dev")["kind"] == "merge"  # merges still land
    assert js("-r", repo_path, "branch", "unprotect", "main") == {"unprotected": "main"}
    assert "no protection rule" in fails("-r", repo_path, "branch", "unprotect", "main")
    assert "already exists" in fails("-r", repo_path, "branch", "create", "v0")
    assert "reserved" in fails("-r", repo_path, "branch", "create", "HEAD")
    assert "~" in fails("-r", repo_path, "tag", "create", "x~1", "--at", "main")
