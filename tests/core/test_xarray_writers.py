"""xarray on session stores, as people first use them. No consolidated metadata (written or
trusted), writers in two real processes that each add a variable both commit, and a
session reading the commit it made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import zarrlake as zl

WORKER = Path(__file__).with_name("xarray_worker.py")


@pytest.fixture
def repo(tmp_path) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    xr.Dataset({"base": (("x",), np.arange(4.0))}, attrs={"title": "t0"}).to_zarr(s.store)
    s.commit("base")
    return repo


def in_two_processes(repo: zl.Repo, action: str, names: tuple[str, str]) -> list[dict]:
    """Both processes stage their change, then both commit; their outcomes, in order."""
    root = Path(__file__).parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), repo.spec.location, action, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        for name in names
    ]
    try:
        for p in procs:  # both have staged before either commits
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        outcomes = []
        for p in procs:
            out, _ = p.communicate("commit\n", timeout=120)
            assert p.returncode == 0
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        return outcomes
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_the_store_does_not_support_consolidated_metadata(repo):
    """The fixture's default to_zarr wrote no consolidated metadata into the root."""
    assert repo.create_session().store.supports_consolidated_metadata is False
    meta = json.loads(repo.readonly_session().read("zarr.json"))
    assert meta["node_type"] == "group" and meta.get("consolidated_metadata") is None


def test_two_processes_adding_different_variables_both_commit(repo):
    before = len(repo.log())
    outcomes = in_two_processes(repo, "add_variable", ("alpha", "beta"))
    assert all("commit" in o for o in outcomes), outcomes
    ds = xr.open_zarr(repo.readonly_session().store).load()
    assert sorted(ds.data_vars) == ["alpha", "base", "beta"]
    assert ds["alpha"].values.tolist() == [5.0] * 4 and ds["beta"].values.tolist() == [4.0] * 4
    assert len(repo.log()) == before + 2


def test_two_processes_setting_identical_attributes_both_commit(repo):
    """Identical changes on both sides are no conflict: the second commit rebases."""
    before = len(repo.log())
    outcomes = in_two_processes(repo, "set_attributes", ("ERA5 subset", "ERA5 subset"))
    assert all("commit" in o for o in outcomes), outcomes
    attrs = xr.open_zarr(repo.readonly_session().store).attrs
    assert (attrs["title"], attrs["source"]) == ("ERA5 subset", "reanalysis")
    assert len(repo.log()) == before + 2


def test_an_array_added_with_plain_zarr_shows_in_open_zarr(repo):
    s = repo.create_session()
    arr = zarr.open_group(s.store).create_array(
        "later", shape=(4,), dtype="f8", dimension_names=["x"]
    )
    arr[:] = np.ones(4)
    s.commit("plain zarr")
    ds = xr.open_zarr(repo.readonly_session().store)
    assert sorted(ds.data_vars) == ["base", "later"]


def test_the_session_reads_the_commit_it_made(repo):
    """Issue 14 item 4: right after commit, and again later, never the older base."""
    s = repo.create_session()
    xr.Dataset({"new": (("x",), np.arange(4.0) * 2)}).to_zarr(s.store, mode="a")
    cid = s.commit("new")
    for _ in range(3):
        ds = xr.open_zarr(s.store).load()
        assert sorted(ds.data_vars) == ["base", "new"]
        assert ds["new"].values.tolist() == [0.0, 2.0, 4.0, 6.0]
    s.wait()  # the staged records are gone: reads are the commit's
    assert sorted(xr.open_zarr(s.store).data_vars) == ["base", "new"]
    other = repo.create_session()  # a later commit by someone else is not seen by `s`
    xr.Dataset({"more": (("x",), np.zeros(4))}).to_zarr(other.store, mode="a")
    other.commit("more")
    assert sorted(xr.open_zarr(s.store).data_vars) == ["base", "new"]
    assert repo.resolve("main") != cid
