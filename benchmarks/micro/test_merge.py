"""Merge cost: two branches with N changed chunks each (disjoint), merged into main, against
a commit of the same size.

A commit returns before its session's staged records are dropped (a background thread does
that); setup waits for that cleanup, untimed, so that the timed call does not share the 2
cores with the previous commit's cleanup.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import zarr

from zarrlake.repo import Repo
from zarrlake.session import Session


def settle(session: Session) -> None:
    """Wait for the committed session's background cleanup (no public API for it yet)."""
    cleanup = getattr(getattr(session, "_txn", None), "cleanup", None)
    if cleanup is not None:
        cleanup.result()


@pytest.fixture
def chunks(quick: bool) -> int:
    return 1000 if quick else 10_000


@pytest.fixture
def rounds(quick: bool) -> int:
    return 1 if quick else 3


def new_repo(root: Path, n: int) -> Repo:
    """A repository with an array of 2n one-chunk elements on main, and a branch dev."""
    repo = Repo.create(str(root))
    s = repo.create_session()
    zarr.open_group(s.store, mode="a").create_array(
        "a", shape=(2 * n,), chunks=(1,), dtype="<i8", fill_value=0, compressors=None
    )
    s.commit("create")
    repo.create_branch("dev")
    return repo


def stage(repo: Repo, branch: str, start: int, n: int) -> Session:
    s = repo.create_session(branch)
    s.write_many([(f"a/c/{i}", struct.pack("<q", i + 1)) for i in range(start, start + n)])
    return s


def test_commit(benchmark, tmp_path: Path, chunks: int, rounds: int) -> None:
    repos: list[Repo] = []

    def setup():
        repo = new_repo(tmp_path / f"repo-{len(repos)}", chunks)
        repos.append(repo)
        return (stage(repo, "main", 0, chunks), f"main: {chunks} chunks"), {}

    benchmark.pedantic(Session.commit, setup=setup, rounds=rounds, iterations=1)
    benchmark.extra_info["chunks"] = chunks
    for repo in repos:
        assert repo.readonly_session("main").read("a/c/0") == struct.pack("<q", 1)
        repo.close()


def test_merge(benchmark, tmp_path: Path, chunks: int, rounds: int) -> None:
    repos: list[Repo] = []

    def setup():
        repo = new_repo(tmp_path / f"repo-{len(repos)}", chunks)
        repos.append(repo)
        for branch, start in (("dev", 0), ("main", chunks)):
            s = stage(repo, branch, start, chunks)
            s.commit(f"{branch}: {chunks} chunks")
            settle(s)
        return (repo, "dev"), {}

    benchmark.pedantic(Repo.merge, setup=setup, rounds=rounds, iterations=1)
    benchmark.extra_info["chunks_per_side"] = chunks
    for repo in repos:
        snap = repo.readonly_session("main")
        assert snap.read("a/c/0") == struct.pack("<q", 1)
        assert snap.read(f"a/c/{2 * chunks - 1}") == struct.pack("<q", 2 * chunks)
        repo.close()
