"""The command line: allowed sources (list, add, remove), virtual import (one commit), stats,
fsck --sources, virtual materialize (and the top-level aliases import-virtual and
materialize)."""

from __future__ import annotations

import json
import os

import pytest

import zarrlake as zl
from tests.helpers.cli import fails, ok, run
from tests.helpers.virtual import assert_same, urls


def test_virtual_commands(tmp_path, archives):
    paths = archives["netcdf4"]
    r = str(tmp_path / "repo")
    zl.Repo.create(r)
    prefix = paths[0].parent.as_uri()
    line = fails("-r", r, "import-virtual", *urls(paths))
    assert "is outside every allowed prefix" in line
    ok("-r", r, "virtual", "sources", "add", prefix)
    assert json.loads(ok("-r", r, "virtual", "sources", "--json").stdout) == [prefix]
    out = ok("-r", r, "virtual", "import", "--concat-dim", "time", "--json", *urls(paths))
    out = json.loads(out.stdout)
    assert out["files"] == 3 and out["virtual_chunks"] == 30
    assert zl.Repo.open(r).list_branches()["main"] == out["commit"]
    stats = json.loads(ok("-r", r, "stats", "--json").stdout)
    assert (stats["virtual_chunks"], stats["virtual_sources"]) == (30, 3)
    assert "virtual: 30 chunks" in ok("-r", r, "stats").stdout
    ok("-r", r, "fsck", "--sources")
    st = paths[1].stat()
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:
        res = run("-r", r, "fsck", "--sources", "--json")
        assert res.returncode == 1
        [problem] = json.loads(res.stdout)["problems"]
        assert problem.startswith(f"{paths[1].as_uri()}: stale: ")
        line = fails("-r", r, "virtual", "materialize", "u10")
        assert "day001.nc changed since it was imported" in line
        assert "day001.nc changed since it was imported" in fails("-r", r, "materialize", "u10")
    finally:
        os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert json.loads(ok("-r", r, "materialize", "u10", "--json").stdout)["chunks"] == 3
    assert zl.Repo.open(r).stats().virtual_chunks == 27


def test_removing_a_source_refuses_new_references_and_keeps_committed_ones(tmp_path, archives):
    paths = archives["netcdf4"]
    r = str(tmp_path / "repo")
    repo = zl.Repo.create(r)
    prefix = paths[0].parent.as_uri()
    assert ok("-r", r, "virtual", "sources", "add", prefix, "--json").json() == [prefix]
    ok("-r", r, "virtual", "import", *urls(paths[:2]))
    assert ok("-r", r, "virtual", "sources", "remove", prefix, "--json").json() == []
    assert repo.virtual_sources() == []
    assert_same(repo.readonly_session(), paths[:2])  # what was committed reads as before
    assert "outside every allowed prefix" in fails("-r", r, "virtual", "import", *urls(paths[2:]))
    repo.add_virtual_source(prefix)
    repo.remove_virtual_source(prefix + "/")  # the same prefix, written with its slash
    assert repo.virtual_sources() == []
    with pytest.raises(zl.NotFoundError, match="nothing to remove"):
        repo.remove_virtual_source(prefix)
