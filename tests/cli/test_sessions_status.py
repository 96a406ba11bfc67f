"""`zarrlake sessions list` shows each session's status: open, committing since when and by
which process, aborted (and why), through the console script in a subprocess."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import zarrlake as zl
from tests.helpers.cli_process import ok
from zarrlake._util import runtime


def test_sessions_list_shows_each_status(tmp_path):
    path = tmp_path / "repo"
    repo = zl.Repo.create(path)
    records = repo._context.records
    assert repo.create_session(message="open one").id  # handed over: its record is stored
    committing = repo.create_session(message="being committed")
    aborted = repo.create_session(message="given up")
    done = repo.create_session(message="done")
    done.commit("done", allow_empty=True)
    now = time.time()
    me = runtime.identity()  # this test process: alive, so the listing leaves it committing
    records.update(
        committing.id,
        lambda r: replace(
            r, status="committing", since=now, committer=me, seal="s", lease=now + 600
        ),
    )
    records.update(
        aborted.id,
        lambda r: replace(
            r, status="aborted", since=now, committer=me, note="did not finish within its lease"
        ),
    )
    host = runtime.host()

    listed = json.loads(ok("-r", str(path), "sessions", "list", "--json").stdout)
    by_message = {s["message"]: s for s in listed}
    assert set(by_message) == {"open one", "being committed", "given up"}
    assert by_message["open one"]["status"] == "open"
    busy = by_message["being committed"]
    assert busy["status"] == "committing"
    assert busy["committer"] == {"host": host, "pid": os.getpid()}
    assert busy["state"].startswith("committing since ")
    assert busy["state"].endswith(f"by pid {os.getpid()}@{host}")
    gone = by_message["given up"]
    assert gone["status"] == "aborted" and gone["note"] == "did not finish within its lease"

    table = ok("-r", str(path), "sessions", "list", env={"COLUMNS": "300"}).stdout
    assert "state" in table.splitlines()[0]
    assert "committing since " in table and f"by pid {os.getpid()}@{host}" in table
    assert "aborted since " in table and "done" not in table
