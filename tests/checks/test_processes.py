"""Processes committing at once onto a guarded branch: only the commits that pass land,
whatever the metastore; each refused commit leaves its session open."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.checks.conftest import COLS, ROWS
from zarrlake.checks import ValueRange

WRITER = """
import json, sys
import zarr
import zarrlake as zl
where, me = json.loads(sys.argv[1]), int(sys.argv[2])
repo = zl.Repo.open(**where)
out = []
for j in range(4):
    row = 2 * j + me  # rows apart: no conflict, only checks decide
    good = (j + me) % 2 == 0
    s = repo.create_session()
    zarr.open_group(s.store)["t"][row] = (10.0 if good else 90.0) + j
    try:
        out.append(["landed", row, s.commit(f"{me}/{j}")])
    except zl.ChecksFailedError as e:
        out.append(["refused", row, s.state, str(e)])
print(json.dumps(out))
"""


@pytest.mark.slow
def test_concurrent_processes_land_only_passing_commits(where):
    repo = zl.Repo.open(**where)
    repo.add_check("range", ValueRange("t", 0, 50))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, json.dumps(where), str(me)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for me in (0, 1)
    ]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    landed = {o[2] for out in outs for o in out if o[0] == "landed"}
    refused = [o for out in outs for o in out if o[0] == "refused"]
    assert len(landed) == 4 and len(refused) == 4
    assert all(o[2] == "open" and "'range'" in o[3] for o in refused)
    history = {c.id for c in repo.log()}
    assert landed <= history and len(history) == 1 + 4 + 1  # init, t and time, 4 landed
    t = zarr.open_array(repo.readonly_session().store, path="t")[:]
    assert t.shape == (ROWS, COLS) and np.nanmax(t) <= 50
    good_rows = sorted(o[1] for out in outs for o in out if o[0] == "landed")
    assert all((t[r] > 1).all() for r in good_rows)
