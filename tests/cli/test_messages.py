"""What the command line says (in-process): the graph of a merge, show of a merge, a revert
that changes nothing, fsck's problem list, blame outside the grid, --as-of on the read
commands, and what changed in metadata."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok, run


@pytest.fixture
def merged(tmp_path) -> tuple[zl.Repo, str]:
    """The README's merge example: dev writes the top rows, main the bottom rows, merged."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session("main")
    root = zarr.open_group(s.store)
    root.create_array("t", shape=(4, 6), chunks=(2, 3), dtype="f4", fill_value=0)
    s.commit("Create t")
    repo.create_branch("dev", at="main")
    for branch, rows, value in (("dev", slice(0, 2), 1), ("main", slice(2, 4), 2)):
        s = repo.create_session(branch)
        zarr.open_array(s.store, path="t")[rows, :] = value
        s.commit(f"rows on {branch}")
    repo.merge("dev", into="main", message="Merge dev")
    yield repo, str(repo.spec.location)
    repo.close()


def test_graph_draws_the_fork_where_git_does(merged):
    _, r = merged
    drawn = ok("-r", r, "log", "--graph").stdout.splitlines()
    lines = [graph_part(line) for line in drawn]
    # git log --graph: the fork line comes before the commit both branches start from
    assert lines == ["*", "|\\", "* |", "| *", "|/", "*", "*"], drawn
    assert drawn[5].endswith("Create t") and drawn[6].endswith("Repository initialized")


def graph_part(line: str) -> str:
    """The graph drawn left of a `log --graph` line's commit id."""
    parts = []
    for token in line.split(" "):
        if not token or set(token) - set("*|/\\"):
            break
        parts.append(token)
    return " ".join(parts)


def test_show_of_a_merge_prints_every_parent(merged):
    repo, r = merged
    head = repo.commit_info("main")
    assert len(head.parent_ids) == 2
    out = ok("-r", r, "show", "main").stdout
    for parent in head.parent_ids:
        assert parent in out
    assert "changes against the first parent" in out
    assert ok("-r", r, "show", "main", "--json").json()["commit"]["parents"] == list(
        head.parent_ids
    )


def test_a_revert_that_changes_nothing_makes_no_commit(merged):
    repo, r = merged
    ok("-r", r, "revert", "main^2")  # undo dev's rows
    head = repo.resolve("main")
    message = fails("-r", r, "revert", "main~1^2")  # the same commit again: nothing left
    assert "changes nothing" in message and "--allow-empty" in message
    assert repo.resolve("main") == head
    out = ok("-r", r, "revert", "main~1^2", "--allow-empty", "--json").json()
    assert repo.resolve("main") == out["commit"] != head
    assert repo.diff(head, "main").is_empty()


def test_fsck_lists_each_problem_once_without_wrapping(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    values = np.random.default_rng(0).random(4000)
    for name in ("a", "b"):  # 8000-byte chunks, staged in one fragment object per session
        s = repo.create_session()
        zarr.open_group(s.store).create_array(name, data=values, chunks=1000)
        s.commit(f"add {name}")
    store = repo._context.object_store
    pack = repo.readonly_session()._engine.lookup("a/c/0").location
    store.delete(pack)  # its chunks are referenced by four keys, in two commits
    res = run("-r", repo.spec.location, "fsck")
    assert res.code == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith("1 problem(s) found"), res.stdout
    [problem] = lines[1:]
    assert problem.startswith(f"  {pack}: missing: ") and "more reference(s)" in problem
    assert len(problem) > 120  # longer than the width a pipe gets, and still one line
    assert len(run("-r", repo.spec.location, "fsck", "--json").json()["problems"]) == 1
    repo.close()


def test_blame_outside_the_grid_and_a_session_on_a_tag(merged):
    repo, r = merged
    assert "outside the chunk grid of 't': 2 x 2 chunks" in fails("-r", r, "blame", "t", "2", "0")
    repo.create_tag("v1", at="main")
    with pytest.raises(zl.errors.InvalidInputError, match="'v1' is a tag"):
        repo.create_session("v1")
    with pytest.raises(zl.NotFoundError, match="branch 'nope' does not exist"):
        repo.create_session("nope")


def test_read_commands_take_as_of(merged):
    repo, r = merged
    created = repo.log("main")[-2]  # "Create t", before any rows were written
    at = created.timestamp.isoformat()
    assert ok("-r", r, "log", "--as-of", at, "--json").json()[0]["id"] == created.id
    assert ok("-r", r, "show", "main", "--as-of", at, "--json").json()["commit"]["id"] == (
        created.id
    )
    assert ok("-r", r, "cat", "main", "t", "--as-of", at, "--json").json()["values"][0] == [0] * 6
    assert "stored 0" in ok("-r", r, "ls", "main", "--as-of", at).stdout
    assert ok("-r", r, "diff", "main", "dev", "--as-of", at, "--json").json()["summary"] == []
    assert "never written" in fails("-r", r, "blame", "t", "0", "0", "--as-of", at)
    assert "has no commit at or before 2000-01-01" in fails("-r", r, "log", "--as-of", "2000-01-01")
    assert "bad date 'yesterday'" in fails("-r", r, "ls", "--as-of", "yesterday", code=2)


def test_diff_says_what_changed_in_metadata(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    arr = zarr.open_group(s.store).create_array("m", shape=(4,), chunks=(2,), dtype="i4")
    arr.attrs.update({"units": "K", "old": 1})
    v1 = s.commit("create m")
    s = repo.create_session()
    arr = zarr.open_array(s.store, path="m")
    arr.resize((8,))
    arr.attrs.update({"units": "C", "new": [1, 2]})
    del arr.attrs["old"]
    v2 = s.commit("resize m")
    s = repo.create_session()
    zarr.open_group(s.store).create_array(
        "m", shape=(8,), chunks=(4,), dtype="f8", overwrite=True, compressors=None
    )[:] = np.arange(8)
    v3 = s.commit("redefine m")
    r = str(repo.spec.location)
    out = ok("-r", r, "diff", v1, v2).stdout
    for line in (
        "m: shape [4] -> [8]",
        'm: attribute \'units\' changed: "K" -> "C"',
        "m: attribute 'old' removed",
        "m: attribute 'new' added: [1, 2]",
    ):
        assert line in out, out
    out = ok("-r", r, "diff", v2, v3).stdout
    for line in ('m: dtype "int32" -> "float64"', "m: chunks [2] -> [4]", "m: codecs "):
        assert line in out, out
    meta = ok("-r", r, "diff", v1, v2, "--json").json()["metadata"]["m"]
    assert meta["shape"] == [[4], [8]]
    assert meta["attributes"] == {
        "added": {"new": [1, 2]},
        "removed": ["old"],
        "changed": {"units": ["K", "C"]},
    }
    repo.close()


def test_s3_settings_exported_for_s3_do_not_refuse_a_local_repository(tmp_path, monkeypatch):
    zl.Repo.create(tmp_path / "r").close()
    monkeypatch.setenv("ZARRLAKE_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ZARRLAKE_REGION", "eu-west-1")
    assert "Repository initialized" in ok("-r", tmp_path / "r", "log").stdout
    # given on the command line, they are still checked against the location
    line = fails("-r", tmp_path / "r", "--endpoint-url", "http://127.0.0.1:9", "log")
    assert "unknown storage option(s) for a local directory: endpoint_url" in line
