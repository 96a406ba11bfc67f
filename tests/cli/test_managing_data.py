"""The command line of export, clone, pull, purge and fsck --purges: what each prints and
its JSON, the refusals as one-line errors, exit codes."""

from __future__ import annotations

import json

import numpy as np
import zarr

import zarrlake as zl
from tests.helpers.cli import run


def make(tmp_path) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g.create_array("t", shape=(16, 16), chunks=(8, 8), dtype="f8")[:] = np.arange(256.0).reshape(
        16, 16
    )
    g.create_array("secret", shape=(4, 64), chunks=(4, 64), dtype="f8", compressors=None)[:] = 1.5
    repo.create_tag("v1", at=s.commit("one"))
    s = repo.create_session()
    del zarr.open_group(s.store)["secret"]
    s.commit("two")
    return repo


def test_export_clone_pull(tmp_path):
    repo = make(tmp_path)
    r = str(tmp_path / "repo")
    res = run("-r", r, "export", "v1", tmp_path / "out", "--array", "t", "--json")
    assert res.code == 0, res.stderr
    assert res.json()["arrays"] == 1 and res.json()["chunks"] == 4
    got = zarr.open_array(tmp_path / "out", path="t", mode="r")[:]
    np.testing.assert_array_equal(got, np.arange(256.0).reshape(16, 16))
    again = run("-r", r, "export", "v1", tmp_path / "out")
    assert again.code == 1 and "not empty" in again.stderr and "--overwrite" in again.stderr
    res = run("-r", r, "clone", tmp_path / "copy", "--depth", "1")
    assert res.code == 0, res.stderr
    assert "cloned" in res.stdout and "branch/main" in res.stdout and "history cut" in res.stdout
    s = repo.create_session()
    zarr.open_array(s.store, path="t")[:8] = 0
    s.commit("three")
    res = run("-r", tmp_path / "copy", "pull", "--json")
    assert res.code == 0, res.stderr
    assert res.json()["commits"] == 1 and res.json()["refs"] == {
        "branch/main": repo.resolve("main")
    }
    res = run("-r", tmp_path / "copy", "fsck", "--json")
    assert res.code == 0 and res.json()["ok"], res.stdout


def test_purge_and_fsck_purges(tmp_path):
    make(tmp_path)
    r = str(tmp_path / "repo")
    missing = run("-r", r, "purge", "secret")
    assert missing.code != 0 and "--reason and --by" in missing.stderr
    dry = run("-r", r, "purge", "secret", "--reason", "leak", "--by", "me", "--dry-run")
    assert dry.code == 0 and "would remove 1 chunk reference" in dry.stdout, dry.stderr
    assert run("-r", r, "purge", "--list", "--json").json() == []
    refused = run("-r", r, "purge", "t", "--reason", "x", "--by", "me")
    assert refused.code == 1 and "branch 'main' still holds" in refused.stderr
    res = run("-r", r, "purge", "secret", "--reason", "leak", "--by", "me", "--json")
    assert res.code == 0, res.stderr
    record = res.json()
    assert record["state"] == "done" and record["ranges"] == 1  # (a 2 KiB chunk: packed)
    listed = run("-r", r, "purge", "--list")
    assert record["id"] in listed.stdout and "by me: leak" in listed.stdout
    assert "(secret)" in listed.stdout
    proof = run("-r", r, "fsck", "--purges")
    assert proof.code == 0 and "1 purge(s) proven" in proof.stdout
    cat = run("-r", r, "cat", "v1", "secret")
    assert cat.code == 1 and f"purge {record['id']}" in cat.stderr
    res = run("-r", r, "clone", tmp_path / "copy")
    assert res.code == 0, res.stderr
    proof = run("-r", tmp_path / "copy", "fsck", "--purges", "--against", r, "--json")
    assert proof.code == 0 and proof.json() == {
        "ok": True,
        "purges": [record["id"]],
        "problems": [],
    }
    sliced = run(
        "-r",
        r,
        "purge",
        "t",
        "--slice",
        "0:8,:",
        "--reason",
        "x",
        "--by",
        "me",
        "--force",
        "--json",
    )
    assert sliced.code == 0 and sliced.json()["region"] == "0:8,:", sliced.stderr
    assert json.loads(run("-r", r, "purge", "--list", "--json").stdout)[1]["chunks"] == 4
