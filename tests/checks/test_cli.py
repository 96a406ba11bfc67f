"""`zarrlake check add|list|run|remove` as a user runs them (the console script's entry
point, in this process): JSON output, clear errors, and exit code 1 when a check fails."""

from __future__ import annotations

import json

import pytest
import zarr

import zarrlake as zl
from tests.helpers.cli import fails, ok, run


@pytest.mark.slow
def test_add_list_run_remove(repo, tmp_path):
    r = ["-r", repo.spec.location]
    added = json.loads(
        ok(*r, "check", "add", "t-range", "--kind", "value-range", "--array", "t",
           "--min", "0", "--max", "50", "--branch", "main", "--branch", "release/*",
           "--json").stdout
    )  # fmt: skip
    assert added["branches"] == ["main", "release/*"]
    assert added["check"] == {"kind": "value-range", "array": "t", "min": 0.0, "max": 50.0}
    ok(*r, "check", "add", "attrs", "--kind", "required-attrs", "--array", "t",
       "--attr", "units", "--attr", "standard_name")  # fmt: skip
    ok(*r, "check", "add", "mono", "--kind", "monotonic",
       "--json-params", '{"coord": "time", "step": 1}')  # fmt: skip
    listed = json.loads(ok(*r, "check", "list", "--json").stdout)
    assert [c["name"] for c in listed] == ["attrs", "mono", "t-range"]
    assert "value-range" in ok(*r, "check", "list").stdout

    repo.create_branch("day")
    s = repo.create_session("day")
    zarr.open_group(s.store)["t"][3] = 99.0
    day = s.commit("a hot day")
    res = run(*r, "check", "run", "day", "--base", "main", "--json")
    assert res.returncode == 1
    got = {x["name"]: x for x in json.loads(res.stdout)}
    assert not got["t-range"]["passed"] and got["t-range"]["chunks"] == [[3, 0]]
    assert got["t-range"]["commit"] == day and got["attrs"]["passed"]
    assert run(*r, "check", "run", "day", "--name", "attrs").returncode == 0
    assert "FAILED" in run(*r, "check", "run", "day").stdout
    assert "'t-range'" in fails(*r, "merge", "day", "--target", "main")

    assert json.loads(ok(*r, "check", "remove", "t-range", "--json").stdout) == {
        "removed": "t-range"
    }
    assert ok(*r, "check", "run", "day", "--json").returncode == 0
    assert [c.name for c in zl.Repo.open(repo.spec.location).list_checks()] == ["attrs", "mono"]


def test_bad_input_is_named(repo):
    r = ["-r", repo.spec.location, "check"]
    line = fails(*r, "add", "m", "--kind", "monotonic", "--array", "t", code=2)
    assert "does not take --array" in line
    assert "'nope' is not one of 'max-nan-fraction'" in fails(*r, "add", "m", "--kind", "nope",
                                                                code=2)  # fmt: skip
    assert "not valid JSON" in fails(*r, "add", "m", "--kind", "value-range",
                                     "--json-params", "{", code=2)  # fmt: skip
    assert "no check named 'x'" in fails(*r, "remove", "x")
