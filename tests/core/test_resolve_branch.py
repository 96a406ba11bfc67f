"""A branch name resolves with one read of the branch head, without loading ref
expressions (a new process reading `main` needs none); tags, commit ids and expressions
resolve as before."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import zarr

import zarrlake as zl

READ = """
import sys
import zarr
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
print(zarr.open_array(repo.readonly_session("main").store, path="a", mode="r")[1].sum())
print("zarrlake.vc.refexpr" in sys.modules)
"""


def test_reading_a_branch_in_a_new_process_loads_no_ref_expressions(tmp_path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(2, 4), chunks=(1, 4), dtype="i4")[...] = np.arange(
        8
    ).reshape(2, 4)
    s.commit("values")
    repo.close()
    out = subprocess.run(
        [sys.executable, "-c", READ, str(tmp_path / "repo")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["22", "False"]


def test_tags_ids_and_expressions_resolve_as_before(tmp_path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    first = repo.resolve("main")
    s = repo.create_session()
    s.write("x/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    second = s.commit("second")
    repo.create_tag("v1", first)
    assert repo.resolve("v1") == first
    assert repo.resolve("main~1") == first
    assert repo.resolve(second[:12]) == second
    repo.create_branch("old", first)
    assert (repo.resolve("old"), repo.resolve("old~0"), repo.resolve("main^")) == (first,) * 3
    repo.close()
