"""The `zarrlake` command: exit codes, --json output, and one clear error line (no traceback)
for bad input. The commands run in this process (tests/helpers/cli.py, the console script's
entry point); what a real process shows (start-up, the environment, the working directory,
--debug's traceback) goes through the installed console script in a subprocess."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.helpers import cli_process as process
from tests.helpers.cli import fails, ok, run


@pytest.fixture
def repo_dir(tmp_path) -> Path:
    """A repository with a group, an array in two commits, a tag and an open session."""
    path = tmp_path / "repo"
    repo = zl.Repo.create(path)
    s = repo.create_session(message="add t2m", author="alice")
    root = zarr.open_group(s.store, mode="a")
    arr = root.require_group("weather").create_array(
        "t2m",
        shape=(20, 6),
        chunks=(10, 3),
        dtype="f4",
        fill_value=np.nan,
        dimension_names=["time", "x"],
    )
    arr[:] = np.arange(120, dtype="f4").reshape(20, 6)
    s.commit("add t2m")
    repo.create_tag("v1", at="main")
    s = repo.create_session(message="second day", author="bob")
    zarr.open_array(s.store, path="weather/t2m")[10:20, 0:3] = -1
    s.commit("overwrite one chunk")
    # open, its id handed over (a session's record is stored at its first write or hand-over)
    assert repo.create_session(message="pending work", author="carol").id
    return path


def test_init_then_log(tmp_path):
    path = tmp_path / "new"
    res = process.ok("-r", str(path), "init", "--json")
    info = json.loads(res.stdout)
    assert info["location"] == str(path)
    log = json.loads(process.ok("-r", str(path), "log", "--json").stdout)
    assert [c["id"] for c in log] == [info["main"]]
    assert log[0]["message"] == "Repository initialized"
    assert "already exists" in process.fails("-r", str(path), "init")


def test_log_json_limit_and_ref(repo_dir):
    log = json.loads(ok("-r", str(repo_dir), "log", "--json").stdout)
    assert [c["message"] for c in log] == [
        "overwrite one chunk",
        "add t2m",
        "Repository initialized",
    ]
    assert log[0]["parents"] == [log[1]["id"]]
    assert log[0]["author"] == "bob"
    assert datetime.fromisoformat(log[0]["timestamp"]).tzinfo is not None
    limited = json.loads(ok("-r", str(repo_dir), "log", "--limit", "1", "--json").stdout)
    assert [c["id"] for c in limited] == [log[0]["id"]]
    at_tag = json.loads(ok("-r", str(repo_dir), "log", "v1", "--json").stdout)
    assert [c["id"] for c in at_tag] == [log[1]["id"], log[2]["id"]]
    by_prefix = json.loads(ok("-r", str(repo_dir), "log", log[1]["id"][:10], "--json").stdout)
    assert by_prefix[0]["id"] == log[1]["id"]
    text = ok("-r", str(repo_dir), "log").stdout
    assert log[0]["id"][:12] in text and "overwrite one chunk" in text


def test_global_options_after_the_command_and_from_env(repo_dir):
    after = json.loads(process.ok("log", "--json", "-r", str(repo_dir)).stdout)
    env = json.loads(process.ok("log", "--json", env={"ZARRLAKE_REPO": str(repo_dir)}).stdout)
    assert after == env
    assert len(after) == 3


def test_branches(repo_dir):
    r = str(repo_dir)
    head = json.loads(ok("-r", r, "log", "--limit", "1", "--json").stdout)[0]["id"]
    created = json.loads(ok("-r", r, "branch", "create", "dev", "--at", "v1", "--json").stdout)
    tagged = json.loads(ok("-r", r, "tag", "list", "--json").stdout)["v1"]
    assert created == {"branch": "dev", "commit": tagged}
    assert json.loads(ok("-r", r, "branch", "list", "--json").stdout) == {
        "dev": tagged,
        "main": head,
    }
    assert "dev" in ok("-r", r, "branch").stdout
    assert "already exists" in fails("-r", r, "branch", "create", "dev")
    assert "invalid branch name" in fails("-r", r, "branch", "create", "a..b")
    assert "no branch, tag or commit named 'nope'" in fails(
        "-r", r, "branch", "create", "x", "--at", "nope"
    )
    ok("-r", r, "branch", "delete", "dev")
    assert json.loads(ok("-r", r, "branch", "list", "--json").stdout) == {"main": head}
    assert "dev" in fails("-r", r, "branch", "delete", "dev")


def test_tags(repo_dir):
    r = str(repo_dir)
    head = json.loads(ok("-r", r, "log", "--limit", "1", "--json").stdout)[0]["id"]
    assert json.loads(ok("-r", r, "tag", "create", "v2", "--at", "main", "--json").stdout) == {
        "tag": "v2",
        "commit": head,
    }
    assert json.loads(ok("-r", r, "tag", "--json").stdout)["v2"] == head
    assert "already exists" in fails("-r", r, "tag", "create", "v2", "--at", "main")
    assert "--at" in fails("-r", r, "tag", "create", "v3", code=2)
    ok("-r", r, "tag", "delete", "v2")
    assert "v2" not in json.loads(ok("-r", r, "tag", "list", "--json").stdout)


def test_show_commit_and_its_changes(repo_dir):
    r = str(repo_dir)
    shown = json.loads(ok("-r", r, "show", "v1", "--json").stdout)
    assert shown["commit"]["message"] == "add t2m"
    changes = shown["changes"]
    assert set(changes["nodes_added"]) == {"", "weather", "weather/t2m"}
    assert len(changes["chunks_written"]["weather/t2m"]) == 4
    head = json.loads(ok("-r", r, "show", "main", "--json").stdout)
    assert head["changes"]["chunks_written"] == {"weather/t2m": [[1, 0]]}
    assert head["changes"]["summary"] == [
        {"path": "weather/t2m", "change": "data", "chunks_written": 1, "chunks_deleted": 0}
    ]
    initial = json.loads(ok("-r", r, "log", "--json").stdout)[-1]["id"]
    assert json.loads(ok("-r", r, "show", initial, "--json").stdout)["changes"]["summary"] == []
    text = ok("-r", r, "show", initial[:12]).stdout
    assert "initial commit" in text
    assert "no branch, tag or commit" in fails("-r", r, "show", "nope")


def test_diff(repo_dir):
    r = str(repo_dir)
    d = json.loads(ok("-r", r, "diff", "v1", "main", "--json").stdout)
    assert d["chunks_written"] == {"weather/t2m": [[1, 0]]}
    assert d["nodes_added"] == [] and d["metadata_changed"] == []
    back = json.loads(ok("-r", r, "diff", "main", "v1", "--json").stdout)
    assert back["chunks_written"] == {"weather/t2m": [[1, 0]]}
    same = json.loads(ok("-r", r, "diff", "main", "main", "--json").stdout)
    assert same["summary"] == []
    assert "(no changes)" in ok("-r", r, "diff", "main", "main").stdout
    assert "weather/t2m" in ok("-r", r, "diff", "v1", "main").stdout
    assert "'zzz'" in fails("-r", r, "diff", "v1", "zzz")


def test_ls(repo_dir):
    r = str(repo_dir)
    nodes = json.loads(ok("-r", r, "ls", "main", "--json").stdout)
    by_path = {n["path"]: n for n in nodes}
    assert set(by_path) == {"", "weather", "weather/t2m"}
    t2m = by_path["weather/t2m"]
    assert t2m["shape"] == [20, 6] and t2m["chunks"] == [10, 3] and t2m["dtype"] == "float32"
    assert t2m["stored_chunks"] == 4
    assert t2m["dimension_names"] == ["time", "x"]
    sub = json.loads(ok("-r", r, "ls", "main", "weather/t2m", "--json").stdout)
    assert [n["path"] for n in sub] == ["weather/t2m"]
    text = ok("-r", r, "ls", "main").stdout
    assert "t2m" in text and "(time=20, x=6)" in text
    assert "no group or array 'nothing'" in fails("-r", r, "ls", "main", "nothing")


@pytest.mark.slow
def test_cat(repo_dir):
    r = str(repo_dir)
    got = json.loads(
        ok("-r", r, "cat", "main", "weather/t2m", "--slice", "9:11,1", "--json").stdout
    )
    assert got["values"] == [55.0, -1.0]
    old = json.loads(ok("-r", r, "cat", "v1", "weather/t2m", "--slice", "9:11,1", "--json").stdout)
    assert old["values"] == [55.0, 61.0]  # time travel: the tag never sees the later write
    whole = json.loads(ok("-r", r, "cat", "v1", "weather/t2m", "--slice", "...,0", "--json").stdout)
    assert whole["shape"] == [20]
    assert "55." in ok("-r", r, "cat", "v1", "weather/t2m").stdout
    assert "bad slice" in fails("-r", r, "cat", "main", "weather/t2m", "--slice", "0:x", code=2)
    assert "bad slice" in fails("-r", r, "cat", "main", "weather/t2m", "--slice", "1,2,3")
    assert "out of bounds" in fails("-r", r, "cat", "main", "weather/t2m", "--slice", "99,0")
    assert "no array 'weather'" in fails("-r", r, "cat", "main", "weather")


@pytest.mark.slow
def test_sessions(repo_dir):
    r = str(repo_dir)
    listed = json.loads(ok("-r", r, "sessions", "list", "--json").stdout)
    assert [s["message"] for s in listed] == ["pending work"]
    sid = listed[0]["id"]
    assert listed[0]["author"] == "carol" and listed[0]["status"] == "open"
    shown = json.loads(ok("-r", r, "sessions", "show", sid, "--json").stdout)
    assert shown["id"] == sid and shown["changes"]["summary"] == []

    extended = json.loads(ok("-r", r, "sessions", "extend", sid, "2d", "--json").stdout)
    expires = datetime.fromisoformat(extended["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=2))) < timedelta(minutes=5)
    assert "bad duration" in fails("-r", r, "sessions", "extend", sid, "3 fortnights", code=2)
    assert "7 days" in fails("-r", r, "sessions", "extend", sid, "8d")

    ok("-r", r, "sessions", "abandon", sid)
    assert json.loads(ok("-r", r, "sessions", "--json").stdout) == []
    assert "abandoned" in fails("-r", r, "sessions", "abandon", sid)
    assert json.loads(ok("-r", r, "sessions", "show", sid, "--json").stdout)["status"] == (
        "abandoned"
    )
    assert "no session 'nope'" in fails("-r", r, "sessions", "show", "nope")


def test_expired_session_is_refused(repo_dir):
    repo = zl.Repo.open(repo_dir)
    s = repo.create_session(message="will expire")
    repo._context.records.update(s.id, lambda r: replace(r, expires_at=time.time() - 60))
    r = str(repo_dir)
    assert "expired" in fails("-r", r, "sessions", "extend", s.id, "1d")
    assert "expired" in fails("-r", r, "sessions", "abandon", s.id)
    shown = json.loads(ok("-r", r, "sessions", "show", s.id, "--json").stdout)
    assert shown["status"] == "expired" and shown["changes"] is None


def test_missing_repository_and_usage_errors(tmp_path):
    nowhere = tmp_path / "nowhere"
    assert "no zarrlake repository" in process.fails("-r", str(nowhere), "log")
    assert not nowhere.exists()  # reading commands create nothing
    assert "no zarrlake repository" in process.fails("log", cwd=tmp_path)
    assert "No such option: --bogus" in process.fails("-r", str(nowhere), "log", "--bogus", code=2)
    assert "Missing argument" in process.fails("-r", str(nowhere), "cat", code=2)
    assert "No such command" in process.fails("frobnicate", code=2)
    assert "unknown storage option" in process.fails(
        "-r", str(tmp_path), "--storage-option", "colour=blue", "init"
    )
    # s3:// needs no metastore URL (its metastore may be in the bucket): the error is about
    # reaching the bucket, and names it
    assert "s3://bucket/prefix" in process.fails("-r", "s3://bucket/prefix", "log")


def test_debug_shows_the_traceback(tmp_path):
    res = process.run("-r", str(tmp_path / "nowhere"), "log", "--debug")
    assert res.returncode != 0
    assert "Traceback" in res.stderr and "NotFoundError" in res.stderr


COMMANDS = [
    ["init"],
    ["log"],
    ["show"],
    ["diff"],
    ["ls"],
    ["cat"],
    ["fsck"],
    ["demo"],
    ["branch"],
    ["branch", "list"],
    ["branch", "create"],
    ["branch", "delete"],
    ["tag"],
    ["tag", "list"],
    ["tag", "create"],
    ["tag", "delete"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "abandon"],
    ["sessions", "extend"],
]


@pytest.mark.slow
def test_every_command_has_help_with_an_example():
    for cmd in COMMANDS:
        res = ok(*cmd, "--help")
        assert "Example: zarrlake" in res.stdout, cmd
    assert "Example:" in ok("--help").stdout


def test_fsck(repo_dir):
    r = str(repo_dir)
    report = json.loads(ok("-r", r, "fsck", "--json").stdout)
    checked = report.pop("checked")
    assert report == {"ref": None, "ok": True, "problems": [], "expired_history": []}
    assert checked["commits"] == 3 and checked["objects"] > 3 and checked["bytes"] > 0
    assert "ok" in ok("-r", r, "fsck", "v1").stdout
    chunk = next((repo_dir / "chunks").rglob("*"), None) or next(
        p for p in (repo_dir / "fragments").rglob("*") if p.is_file()
    )
    data = bytearray(chunk.read_bytes())
    data[0] ^= 0xFF  # chunk bytes (a fragment's data section comes first)
    chunk.write_bytes(bytes(data))
    res = run("-r", r, "fsck", "--json")
    assert res.returncode == 1
    report = json.loads(res.stdout)
    assert not report["ok"] and report["problems"]
    assert any("corrupt" in p or "checksum" in p for p in report["problems"])
    assert "no branch, tag or commit" in fails("-r", r, "fsck", "nope")
