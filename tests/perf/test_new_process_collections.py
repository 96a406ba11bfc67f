"""A new process that opens a sharded array and reads a few inner chunks does not pay a
full garbage collection for it. CPython 3.12 runs a process's first full (generation 2)
collection once generation 1 has overflowed ten times, about 120 young collections in: a
process that has imported numpy and zarr is about 100 in. Two things kept zarrlake's first
read inside that window, and are counted here (counts, not times):

- loading the package's modules on first use collected garbage tens of times (they make
  thousands of long-lived objects); `_util/lazy.load` pauses collection while they load;
- a shard's lookup built a reference and a statistics object per inner chunk (512 objects
  for a shard of 256), kept with the assembled shard; it is now built from the manifest's
  columns, so what a read leaves alive does not grow with the inner chunks of a shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl

PROBE = """
import gc, json, sys
runs = {"load": [0, 0, 0], "read": [0, 0, 0]}
phase = None


def count(event, info):
    if event == "stop" and phase is not None:
        runs[phase][info["generation"]] += 1


gc.callbacks.append(count)
import numpy as np
import zarr

path, picks, mode, expect = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
phase = "load"
import zarrlake as zl

store = zl.Repo.open(path).readonly_session("main").store
phase = "read"
if mode == "retained":
    gc.collect()
    before = len(gc.get_objects())
arr = zarr.open_array(store, path="a", mode="r")
got = [arr[tuple(slice(a, b) for a, b in pick)] for pick in picks]
phase = None
retained = 0
if mode == "retained":
    gc.collect()
    retained = len(gc.get_objects()) - before
values = np.load(expect)
same = all(np.array_equal(g, values[tuple(slice(a, b) for a, b in p)]) for g, p in zip(got, picks))
print(json.dumps({"runs": runs, "retained": retained, "same": same, "on": gc.isenabled()}))
"""

INNER = (1, 8, 8)
"""256-byte inner chunks: a shard of many of them is small on disk."""


def _build(root: Path, shard: tuple[int, ...]) -> tuple[Path, list[list[list[int]]]]:
    """A repository with array `a` of two shards of shape `shard`, committed, its values
    saved beside it; and 10 inner chunks of it picked at random (as [start, stop] pairs)."""
    shape = (2 * shard[0], *shard[1:])
    values = np.random.default_rng(7).random(shape, dtype="f4")
    repo = zl.Repo.create(root / "repo")
    s = repo.create_session()
    arr = zarr.create_array(s.store, name="a", shape=shape, chunks=INNER, shards=shard, dtype="f4")
    arr[:] = values
    s.commit("two shards")
    repo.close()
    np.save(root / "values.npy", values)
    grid = [n // c for n, c in zip(shape, INNER, strict=True)]
    rng = np.random.default_rng(31)
    picks = [[int(rng.integers(g)) for g in grid] for _ in range(10)]
    picks[0][0], picks[1][0] = 0, grid[0] - 1  # both shards
    spans = [[[i * c, (i + 1) * c] for i, c in zip(p, INNER, strict=True)] for p in picks]
    return root, spans


def _probe(root: Path, picks: list, mode: str) -> dict:
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(root / "repo"),
            json.dumps(picks),
            mode,
            str(root / "values.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["same"] and out["on"], out  # read the right values; collection left on
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[Path, list]:
    """Two shards of 1,024 inner chunks each (the benchmark's have 256)."""
    return _build(tmp_path_factory.mktemp("big"), (1, 256, 256))


def test_open_and_read_of_ten_inner_chunks_runs_no_full_collection(sharded):
    """`import zarrlake` + open + a read-only session, then 10 inner chunks of two shards
    read, after numpy and zarr: no full collection, and loading the package collects
    little (about 20 young collections before loads paused collection; 3 after)."""
    out = _probe(*sharded, "runs")
    load, read = out["runs"]["load"], out["runs"]["read"]
    assert load[2] == 0 and read[2] == 0, out
    assert sum(load) <= 6, out
    assert sum(read) <= 6, out


def test_what_a_read_leaves_alive_does_not_grow_with_the_inner_chunks_of_a_shard(sharded, tmp_path):
    """The objects alive after the read (garbage collected before and after) for shards
    of 16 and of 1,024 inner chunks: the same but for a few (a reference and statistics
    per inner chunk made it about 4,000 more)."""
    few = _probe(*_build(tmp_path, (1, 32, 32)), "retained")["retained"]
    many = _probe(*sharded, "retained")["retained"]
    assert abs(many - few) < 100, (few, many)


def test_a_pause_restores_collection_as_it_was_even_when_the_load_fails():
    """Nested pauses share one; collection comes back on only if it was on before, and
    after a load that raised."""
    import gc

    from zarrlake._util.lazy import load, paused_collection

    assert gc.isenabled()
    with paused_collection():
        with paused_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    with pytest.raises(ModuleNotFoundError):
        load("zarrlake.no_such_module")
    assert gc.isenabled()
    gc.disable()  # a user's choice stays
    try:
        with paused_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


FORK = """
import gc, os
from zarrlake._util.lazy import paused_collection

with paused_collection():
    pid = os.fork()
    if pid == 0:
        os._exit(0 if gc.isenabled() else 3)
    _, status = os.waitpid(pid, 0)
    assert not gc.isenabled()
print(os.waitstatus_to_exitcode(status), gc.isenabled())
"""


def test_a_child_forked_during_a_load_collects():
    """The loading thread may not exist in a forked child: the pause ends there."""
    res = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "True"]
