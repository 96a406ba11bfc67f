"""`zarrlake demo` end to end on a small dataset, through the console script (its own Spark,
in a subprocess): what it reports (`--json`) is checked here, step by step, then the
repository it leaves behind; and which directories it may use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.demo.data import Grid, generate_block
from zarrlake.demo.directory import prepare_directory

ZARRLAKE = str(Path(sys.executable).with_name("zarrlake"))
DAYS = 3
GRID = Grid(days=DAYS, lat=32, lon=40, lat_chunk=16, lon_chunk=20)  # what --small builds
ENV = {
    **os.environ,
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
}


def demo(where: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    args = [ZARRLAKE, "demo", "--dir", str(where), "--days", str(DAYS), "--small", *extra]
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=timeout)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[Path, dict, str]:
    """(repository directory, the --json result, the story as printed on stderr). The
    directory holds an earlier demo's repository, which the run replaces."""
    where = tmp_path_factory.mktemp("demo") / "demo-repo"
    prepare_directory(where)
    zl.Repo.create(where).close()
    res = demo(where, "--json", timeout=540)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    return where, json.loads(res.stdout), res.stderr


@pytest.mark.slow
def test_the_story_is_told(demo_run):
    _, _, story = demo_run
    titles = [
        "1. Ingest",
        "2. History",
        "3. Concurrent writers",
        "4. A Spark job that fails",
        "5. A fix on a release branch",
        "6. Write, audit, publish",
        "7. Garbage collection",
        "8. Summary",
    ]
    positions = [story.index(t) for t in titles]
    assert positions == sorted(positions)
    for text in (
        "Replaced the previous demo repository at",
        "tagged v1.0",
        "byte-identical",
        "not yet ingested (all NaN)",
        "Both landed",
        "ConflictError",
        "chunk conflict at 'weather/t2m' chunks (1, 1, 0)",
        "corrupt upstream file for spatial chunk 2",
        "check t2m-physical failed",
        "merge refused",
        "(unchanged)",
        "open sessions left behind: 0",
        "source .venv/bin/activate",
        ".venv/bin/zarrlake",
        "ui",
    ):
        assert text in story, text


@pytest.mark.slow
def test_ingest_and_time_travel(demo_run):
    where, result, _ = demo_run
    assert result["directory"] == str(where) and result["replaced_previous_demo"]
    assert len(set(result["day_commits"])) == DAYS
    tt = result["time_travel"]
    assert tt["days_after_tag"] == 1
    assert tt["tag_commit"] == result["day_commits"][1]
    assert tt["first_day_identical"] and tt["last_day_empty_at_tag"]
    assert tt["last_day_complete_at_main"]


@pytest.mark.slow
def test_an_identical_rerun_stores_no_chunk_bytes(demo_run):
    _, result, _ = demo_run
    replay = result["replay"]
    assert "NoChangesError" in replay["refused"]  # first refused; then asked for (allow_empty)
    assert replay["commit"] != replay["previous_head"]
    assert not any(replay["changes"].values())
    assert replay["stored_bytes_added"] == 0
    # only the commit's own small records; the day is ~369 kB of float32
    assert 0 < replay["disk_bytes_added"] < replay["day_bytes"] / 20


@pytest.mark.slow
def test_disjoint_writers_land_and_the_overlapping_one_conflicts(demo_run):
    _, result, _ = demo_run
    assert [(w["name"], w["status"]) for w in result["disjoint_writers"]] == [
        ("north-station-team", "landed"),
        ("south-station-team", "landed"),
    ]
    a, b = result["overlapping_writers"]
    assert (a["name"], a["status"], a["conflicts"]) == ("writer-A", "landed", [])
    assert (b["name"], b["status"], b["commit"]) == ("writer-B", "conflict", None)
    assert b["conflicts"] == ["chunk conflict at 'weather/t2m' chunks (1, 1, 0)"]
    retry = result["retry"]
    assert (retry["name"], retry["status"]) == ("writer-B", "landed")


@pytest.mark.slow
def test_the_failed_job_leaves_the_branch_untouched(demo_run):
    _, result, _ = demo_run
    failed = result["failed_job"]
    assert "corrupt upstream file for spatial chunk 2" in failed["error"]
    assert failed["fail_chunk"] == 2
    assert failed["head_after"] == failed["head_before"] == result["retry"]["commit"]
    assert failed["data_untouched"] and failed["open_sessions"] == 0


@pytest.mark.slow
def test_the_release_fix_is_merged_into_main(demo_run):
    where, result, _ = demo_run
    merge = result["merge"]
    assert merge["main_has_change"]
    repo = zl.Repo.open(where)
    merged = repo.commit_info(merge["merge_commit"])  # main's head until the audited day
    assert merged.parent_ids == (result["failed_job"]["head_after"], merge["branch_commit"])
    assert repo.log("main", limit=2)[1].id == merged.id
    fixed = zarr.open_array(repo.readonly_session("main").store, path="weather/v10", mode="r")
    expected = generate_block(GRID, 0, 0)["v10"] + np.float32(0.25)
    assert np.array_equal(fixed[0:24, 0:16, 0:20], expected)


@pytest.mark.slow
def test_the_reprocessed_day_is_published_only_once_its_checks_pass(demo_run):
    where, result, _ = demo_run
    audit = result["audit"]
    assert audit["failed_check"] == "t2m-physical"
    assert "weather/t2m" in audit["failed_message"] and "(2, 0, 0)" in audit["failed_message"]
    assert "t2m-physical" in audit["merge_refused"]
    assert audit["checks_after_fix"] == dict.fromkeys(audit["checks"], True)
    assert audit["state"] == "merged" and audit["main_has_fix"] and audit["branch_deleted"]
    repo = zl.Repo.open(where)
    head = repo.log("main", limit=1)[0]
    assert head.id == audit["merge_commit"]
    assert head.parent_ids == (result["merge"]["merge_commit"], audit["fix_commit"])
    fix = repo.commit_info(audit["fix_commit"])
    assert fix.message == "Reprocessed t2m of 2025-01-03 (upstream revision 2): tile 0 in degC"
    kelvin = repo.commit_info(fix.parent_ids[0])  # the refused one, kept in the history
    assert kelvin.message == "Reprocessed t2m of 2025-01-03 (upstream revision 2)"
    t2m = zarr.open_array(repo.readonly_session("main").store, path="weather/t2m", mode="r")
    expected = generate_block(GRID, DAYS - 1, 0, revision=2)["t2m"]  # u10, v10 as before
    assert np.array_equal(t2m[24 * (DAYS - 1) : 24 * DAYS, 0:16, 0:20], expected)
    with pytest.raises(zl.ProtectedBranchError):  # main now takes pull requests only
        repo.merge("v1.0-fix", into="main")


@pytest.mark.slow
def test_gc_reclaims_what_the_failed_job_left(demo_run):
    _, result, _ = demo_run
    gc = result["gc"]
    assert gc["objects_deleted"] > 0
    # at least the chunks of the tasks that ran before the failing one (of 4 tiles x 3 arrays)
    assert gc["bytes_reclaimed"] > result["summary"]["stored_bytes"] / 100
    assert gc["object_bytes_after"] <= gc["object_bytes_before"] - gc["bytes_reclaimed"]


@pytest.mark.slow
def test_the_summary_matches_the_repository(demo_run):
    where, result, _ = demo_run
    s = result["summary"]
    repo = zl.Repo.open(where)
    stats = repo.stats("main")
    assert (s["commits"], s["arrays"], s["chunks"], s["stored_bytes"]) == (
        stats.commits,
        stats.arrays,
        stats.chunks,
        stats.bytes,
    )
    assert s["commits"] == len(repo.log("main"))
    assert s["arrays"] == 6  # t2m, u10, v10 and the lat, lon, time coordinates
    assert (s["branches"], s["tags"]) == (2, 1)
    assert s["logical_bytes"] == GRID.raw_bytes() + 8 * (GRID.lat + GRID.lon + GRID.hours)
    assert s["written_bytes"] > s["logical_bytes"] > 0
    assert 0 < s["stored_bytes"] < s["written_bytes"]
    assert s["disk_bytes"] > s["stored_bytes"]


@pytest.mark.slow
def test_the_repository_history(demo_run):
    where, _, _ = demo_run
    repo = zl.Repo.open(where)
    messages = [c.message for c in repo.log("main")]
    ingests = [m for m in messages if m.startswith("Ingest ")]
    # each day once, plus the idempotent re-run of day 2; the failed job made no commit
    assert sorted(ingests) == sorted(
        ["Ingest 2025-01-01", "Ingest 2025-01-02", "Ingest 2025-01-03", "Ingest 2025-01-02"]
    )
    assert len([m for m in messages if "bias-correct" in m]) == 4  # 2 + A + B's retry
    assert messages[0].startswith("Merge pull request #1 from reprocess-2025-01-03")
    assert messages[1] == "Merge v1.0-fix into main"
    assert messages[-2:] == ["Create the weather dataset", "Repository initialized"]
    assert len(messages) == 2 + len(ingests) + 4 + 1 + 1
    assert list(repo.list_tags()) == ["v1.0"]
    assert sorted(repo.list_branches()) == ["main", "v1.0-fix"]
    assert repo.list_sessions() == []
    assert repo.fsck() == []
    head = zarr.open_array(repo.readonly_session("main").store, path="weather/u10", mode="r")
    expected = generate_block(GRID, DAYS - 1, 0)["u10"]
    assert np.array_equal(head[24 * (DAYS - 1) : 24 * DAYS, :16, :20], expected)


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_another_repository_is_refused(tmp_path):
    """Issue 14 item 1: a copy of a user's repository is not replaced by the demo."""
    original = tmp_path / "quickstart-repo"
    repo = zl.Repo.create(original)
    s = repo.create_session("main")
    zarr.open_group(s.store).create_array("t", shape=(4,), dtype="i4")[:] = np.arange(4)
    s.commit("my data")
    repo.close()
    copy = tmp_path / "qs-copy"
    shutil.copytree(original, copy)
    history = [c.id for c in zl.Repo.open(copy).log("main")]
    files = tree(copy)

    res = demo(copy)
    assert res.returncode == 1
    assert res.stderr.startswith(f"zarrlake: error: {copy} holds a zarrlake repository")
    assert "the demo did not make" in res.stderr and "Traceback" not in res.stderr
    assert tree(copy) == files
    assert [c.id for c in zl.Repo.open(copy).log("main")] == history


def test_a_non_empty_directory_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    res = demo(other)
    assert res.returncode == 1
    assert f"{other} exists and is not empty; not wiping it" in res.stderr
    assert "Traceback" not in res.stderr
    assert tree(other) == {"precious.txt": b"keep me"}
