"""Check results are a cache kept per (commit, base) pair: they go when one of the pair's
commits is expired or collected by gc, and the results of a removed check rule go at the
next gc, on each metastore; a result of a commit still there stays."""

from __future__ import annotations

from datetime import timedelta

import zarrlake as zl
from tests.checks.conftest import write
from zarrlake.checks import MaxChangedChunks, ValueRange


def recorded(repo: zl.Repo) -> set[tuple[str, str, str]]:
    """(commit, base, check) of every result recorded."""
    ctx = repo._context
    return {
        tuple(k.decode().split("/", 1)[1].split("/"))  # type: ignore[misc]
        for k, _, _ in ctx.meta.scan(ctx.refs.partition, prefix=b"checkresult/")
    }


def test_results_go_with_their_commits_and_their_rules(where: dict) -> None:
    repo = zl.Repo.open(**where)
    repo.add_check("range", ValueRange("t", min=0, max=50))
    repo.add_check("few", MaxChangedChunks(4), branches=("nowhere",))
    first = write(repo, t={0: 3.0}).commit("one")
    second = write(repo, t={1: 4.0}).commit("two")
    parent = repo.commit_info(first).parent_ids[0]
    repo.create_branch("tmp")
    dropped = write(repo, "tmp", t={2: 5.0}).commit("on a branch deleted later")
    repo.run_checks(dropped, names=["few"])
    assert recorded(repo) == {
        (first, parent, "range"),
        (second, first, "range"),
        (dropped, second, "few"),
    }

    repo.remove_check("few")  # its result stays until the next gc (a re-added rule finds it)
    repo.delete_branch("tmp")
    repo.gc(timedelta(0))
    assert recorded(repo) == {(first, parent, "range"), (second, first, "range")}

    repo.expire(timedelta(0), ["main"])  # `first` leaves the history; `second` is the head
    assert repo.resolve("main") == second
    assert recorded(repo) == set()  # both pairs held `first`
    third = write(repo, t={3: 6.0}).commit("three")
    assert recorded(repo) == {(third, second, "range")}
    repo.close()
