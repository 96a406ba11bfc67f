"""Cloning and pulling, on each metastore: a copy with the same refs, ids and data (checked
against numpy) that checks clean; a clone pulled twice with a real SIGKILL in the middle of
the first pull, then resumed, copying only what it lacks; refs and depth; a diverged copy
refused; purges carried to copies made before and after them.

Run as a module, this file is the process that is killed:
python -m tests.admin.test_clone '{"what": "pull", "source": {...}, "dest": {...}}'
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.format.chunk_ref import RefKind

ROOT = Path(__file__).resolve().parents[2]


def grow(repo: zl.Repo, n: int, first: int = 0) -> dict[int, np.ndarray]:
    """`n` commits on main, each writing one row band of `big` (32 KiB chunks, objects of
    their own) and of `small` (chunks packed into fragments). Returns main's arrays."""
    for i in range(first, first + n):
        s = repo.create_session()
        g = zarr.open_group(s.store)
        big = g.require_array("big", shape=(64, 512), chunks=(8, 512), dtype="f8", compressors=None)
        small = g.require_array("small", shape=(64, 8), chunks=(8, 8), dtype="f4")
        band = slice(8 * (i % 8), 8 * (i % 8) + 8)
        big[band] = np.full((8, 512), i + 0.5)
        small[band] = np.full((8, 8), i, dtype="f4")
        s.commit(f"c{i}")
    s = repo.readonly_session()
    return {
        0: zarr.open_array(s.store, path="big", mode="r")[:],
        1: zarr.open_array(s.store, path="small", mode="r")[:],
    }


def same_data(copy: zl.Repo, ref: str, expected: dict[int, np.ndarray]) -> None:
    s = copy.readonly_session(ref)
    np.testing.assert_array_equal(zarr.open_array(s.store, path="big", mode="r")[:], expected[0])
    np.testing.assert_array_equal(zarr.open_array(s.store, path="small", mode="r")[:], expected[1])


def copy_args(args: dict) -> dict:
    """Where a copy of the repository made with `args` goes: beside it, same kind."""
    return {**args, "location": str(args["location"]).rstrip("/") + "-copy"}


def open_args(args: dict) -> dict:
    return {k: v for k, v in args.items() if k != "location"}


def run_killed(what: str, source: dict, dest: dict, point: str) -> None:
    env = {
        **os.environ,
        "ZARRLAKE_CRASH_AT": point,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    doc = json.dumps({"what": what, "source": source, "dest": dest})
    proc = subprocess.run(
        [sys.executable, "-m", "tests.admin.test_clone", doc],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]


def test_a_clone_pulled_twice_with_a_kill_in_the_middle(any_metastore):
    source = zl.Repo.create(**any_metastore)
    grow(source, 2)
    source.create_tag("v1")
    source.create_branch("dev")
    dest_args = copy_args(any_metastore)
    copy = zl.Repo.clone(source, dest_args["location"], **open_args(dest_args))
    assert copy.list_branches() == source.list_branches()
    assert copy.list_tags() == source.list_tags()
    assert [c.id for c in copy.log()] == [c.id for c in source.log()]
    assert copy.origin()["location"] == source.spec.location
    assert copy.repo_id != source.repo_id and copy.fsck() == []
    expected = grow(source, 12, first=2)  # 12 commits: hundreds of objects to copy
    head_before = copy.resolve("main")
    run_killed("pull", any_metastore, dest_args, "pull_after_data_batch")
    copy = zl.Repo.open(dest_args["location"], **open_args(dest_args))
    assert copy.resolve("main") == head_before  # no ref moved; what is there checks clean
    assert copy.fsck() == []
    report = copy.pull(source)  # (the origin's metastore password is not recorded)
    assert report.present > 0  # what the killed pull copied is not copied again
    assert report.commits == 12 and report.refs == {"branch/main": source.resolve("main")}
    assert copy.fsck() == [] and copy.fsck(purges=True, against=source) == []
    same_data(copy, "main", expected)
    expected = grow(source, 1, first=14)
    again = copy.pull(source)  # the second pull copies one commit's new objects only
    assert again.commits == 1 and 0 < again.objects <= 8
    same_data(copy, "main", expected)
    assert copy.pull(source).objects == 0  # nothing new: nothing copied
    assert copy.fsck() == []


def test_a_killed_clone_goes_on_when_run_again(tmp_path):
    source = zl.Repo.create(tmp_path / "repo")
    expected = grow(source, 6)
    dest = str(tmp_path / "copy")
    run_killed(
        "clone", {"location": str(tmp_path / "repo")}, {"location": dest}, "pull_after_data_batch"
    )
    copy = zl.Repo.clone(source, dest)  # the same command again
    assert copy.last_pull.present > 0
    assert [c.id for c in copy.log()] == [c.id for c in source.log()]
    same_data(copy, "main", expected)
    assert copy.fsck() == []
    with pytest.raises(zl.AlreadyExistsError, match="not a clone"):
        zl.Repo.clone(zl.Repo.create(tmp_path / "other"), tmp_path / "repo")


def test_chosen_refs_and_depth(tmp_path):
    source = zl.Repo.create(tmp_path / "repo")
    grow(source, 5)
    source.create_branch("dev", at="main~3")
    source.create_tag("v0", at="main~4")
    copy = zl.Repo.clone(source, tmp_path / "copy", refs=["main", "v0"], depth=2)
    assert set(copy.list_branches()) == {"main"} and set(copy.list_tags()) == {"v0"}
    assert [c.message for c in copy.log()] == ["c4", "c3"]
    # main: c4, c3 (cut below); v0 at c0: c0 and the initial commit, its whole history
    assert copy.last_pull.commits == 4 and copy.last_pull.cut == 1
    assert copy.fsck() == []
    expected = grow(source, 3, first=5)
    report = copy.pull()
    assert report.commits == 3 and [c.message for c in copy.log(limit=4)][-1] == "c4"
    same_data(copy, "main", expected)
    with pytest.raises(zl.NotFoundError, match="no branch or tag 'nope'"):
        copy.pull(refs=["nope"])


def test_a_copy_with_commits_of_its_own_is_refused_unless_forced(tmp_path):
    source = zl.Repo.create(tmp_path / "repo")
    grow(source, 2)
    copy = zl.Repo.clone(source, tmp_path / "copy")
    s = copy.create_session()
    zarr.open_array(s.store, path="small")[:8] = -1
    mine = s.commit("only in the copy")
    expected = grow(source, 1, first=2)
    with pytest.raises(zl.FastForwardError, match="main: branch at") as e:
        copy.pull()
    assert e.value.conflicts[0].kind == zl.ConflictKind.DIVERGED
    assert copy.resolve("main") == mine
    copy.pull(force=True)
    same_data(copy, "main", expected)
    assert copy.fsck() == []


def test_a_clone_carries_the_purge_and_a_pull_brings_it_to_an_older_copy(any_metastore):
    source = zl.Repo.create(**any_metastore)
    grow(source, 3)
    leaked = np.arange(8 * 512, dtype="f8").reshape(8, 512) / 7
    s = source.create_session()
    zarr.open_array(s.store, path="big")[:8] = leaked
    v_leak = s.commit("leak")
    ref = source.readonly_session(v_leak)._engine.lookup("big/c/0/0")
    assert ref.kind == RefKind.OBJECT
    grow(source, 1, first=0)  # rows 0-7 written anew at the head
    older_args = copy_args(any_metastore)
    older = zl.Repo.clone(source, older_args["location"], **open_args(older_args))  # before
    record = source.purge("big", region=(slice(0, 8), slice(None)), reason="r", by="me", force=True)
    assert record.objects >= 1
    newer_args = {**any_metastore, "location": str(any_metastore["location"]) + "-new"}
    newer = zl.Repo.clone(source, newer_args["location"], **open_args(newer_args))
    assert [r.id for r in newer.purges()] == [record.id]
    older.pull(source)
    for copy in (older, newer):
        with pytest.raises(zl.PurgedError, match=record.id):
            copy.readonly_session(v_leak).read("big/c/0/0")
        assert copy.fsck() == []
        assert copy.fsck(purges=True, against=source) == []
        needle = leaked[:, :64].tobytes()  # 512 bytes of the leaked chunk
        store = copy._context.object_store
        for key in store.list(""):
            assert needle not in store.get(key), key


if __name__ == "__main__":
    doc = json.loads(sys.argv[1])
    src = zl.Repo.open(doc["source"]["location"], **open_args(doc["source"]))
    dest = doc["dest"]
    if doc["what"] == "clone":
        zl.Repo.clone(src, dest["location"], **open_args(dest))
    else:
        zl.Repo.open(dest["location"], **open_args(dest)).pull(src)
