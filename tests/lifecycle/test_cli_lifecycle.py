"""`zarrlake gc` and `zarrlake expire` through the installed console script, in a
subprocess: --json reports, the human summary by kind in bytes, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import zarrlake as zl
from tests.helpers.lifecycle import all_objects, chunk, unreachable

ZARRLAKE = str(Path(sys.executable).with_name("zarrlake"))


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRLAKE_")}
    return subprocess.run([ZARRLAKE, *args], capture_output=True, text=True, env=env, timeout=120)


def make_garbage(location: Path) -> None:
    repo = zl.Repo.create(location)
    for i in range(3):
        s = repo.create_session()
        s.write("a/c/0", chunk(i, 30_000))
        s.commit(f"c{i}")
    repo.close()


def test_expire_then_gc_json(tmp_path) -> None:
    location = tmp_path / "repo"
    make_garbage(location)
    res = run("-r", str(location), "expire", "--older-than", "0s", "--branch", "main", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["commits_expired"] == 3 and "main" in doc["oldest_retained"]

    before = all_objects(zl.Repo.open(location))
    res = run("-r", str(location), "gc", "--older-than", "0s", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    dry = json.loads(res.stdout)
    assert dry["dry_run"] and dry["by_kind"]["chunks"] == {"objects": 2, "bytes": 60_000}
    assert all_objects(zl.Repo.open(location)) == before

    res = run("-r", str(location), "gc", "--older-than", "0s", "--json")
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert done["objects_deleted"] == dry["objects_deleted"]
    assert done["bytes_deleted"] == dry["bytes_deleted"] > 60_000
    repo = zl.Repo.open(location)
    assert unreachable(repo) == set()
    assert repo.readonly_session().read("a/c/0") == chunk(2, 30_000)


def test_gc_human_summary_and_errors(tmp_path) -> None:
    location = tmp_path / "repo"
    make_garbage(location)
    assert run("-r", str(location), "expire", "--older-than", "0s").returncode == 0
    res = run("-r", str(location), "gc", "--older-than", "0s", "--full")
    assert res.returncode == 0, res.stderr
    assert "chunks" in res.stdout and "58.6 KiB" in res.stdout and "deleted" in res.stdout
    before = all_objects(zl.Repo.open(location))
    for args, message in [
        (("gc", "--older-than", "-1h"), "bad duration"),
        (("gc", "--older-than", "100000d"), "at most"),
        (("expire", "--older-than", "1d", "--branch", "nope"), "nope"),
    ]:
        res = run("-r", str(location), *args)
        assert res.returncode != 0
        assert message in res.stderr and "Traceback" not in res.stderr
    assert all_objects(zl.Repo.open(location)) == before
