"""Commit metadata shows wherever a commit is shown (`log --json`, `show`, the web UI), and
tables show a commit's subject line only (a merge's message has a body)."""

from __future__ import annotations

import json

import numpy as np
import zarr
from starlette.testclient import TestClient

import zarrlake as zl
from tests.helpers.cli import ok
from zarrlake.ui import create_app


def test_metadata_shows_in_log_show_and_the_ui(tmp_path):
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    zarr.open_group(s.store).create_array("a", shape=(2,), chunks=(1,), dtype="i4")[:] = [1, 2]
    cid = s.commit("nightly ingest\n\nbody line one\nbody line two", metadata={"job": "42"})

    log = json.loads(ok("-r", str(tmp_path / "r"), "log", "--json", "--limit", "1").stdout)
    assert log[0]["metadata"] == {"job": "42"}
    shown = json.loads(ok("-r", str(tmp_path / "r"), "show", "main", "--json").stdout)
    assert shown["commit"]["metadata"] == {"job": "42"}
    text = ok("-r", str(tmp_path / "r"), "show", "main").stdout
    assert "job: 42" in text and "body line two" in text  # show prints the whole message

    table = ok("-r", str(tmp_path / "r"), "log").stdout
    assert "nightly ingest" in table and "body line" not in table
    assert len([line for line in table.splitlines() if line.strip()]) == 1 + 2  # header, 2

    client = TestClient(create_app(repo))
    page = client.get(f"/commit/{cid}").text
    assert ">job</th><td>42</td>" in page
    log_page = client.get("/log", params={"ref": "main"}).text
    assert "nightly ingest" in log_page and "body line one" not in log_page
    assert np.array_equal(zarr.open_array(repo.readonly_session().store, path="a")[:], [1, 2])
