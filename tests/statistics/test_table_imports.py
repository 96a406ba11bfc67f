"""`Repo.chunk_stats` and `zl.select` in a new process import no pandas (pyarrow's
`pa.array`, `pa.scalar` and `to_numpy` import it on their first call, 0.8-1.7 s): the keys
of plain, sharded, "."-separated and non-ASCII-named arrays are parsed and the columns made
from numpy's buffers, and the tables still equal numpy's statistics of the values."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa

import zarrlake as zl
from tests.statistics.model import Spec, assert_matches

READ = """
import sys
import pyarrow as pa
import zarrlake as zl
repo = zl.Repo.open(sys.argv[1])
tables = {name: repo.chunk_stats(name) for name in sys.argv[3:]}
picked = sorted(c for c, _ in zl.select(repo, "plain", where="plain > 60"))
print("pandas" in sys.modules, "pandas._libs" in sys.modules)
print(*(f"{i},{j}" for i, j in picked))
for i, table in enumerate(tables.values()):  # (written after the check: IPC may load more)
    with pa.OSFile(f"{sys.argv[2]}/{i}.arrow", "wb") as f:
        with pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
"""

SPECS = [
    (Spec("plain", (20, 30), (10, 10), "float32", float("nan")), {}),
    (Spec("température", (7, 9), (4, 4), "int16", 3), {}),  # (8 bytes of path, 7 characters)
    (Spec("sharded_array", (16, 12), (4, 3), "uint8", 0, shards=(8, 6)), {}),
    (
        Spec("dotted_keys_", (9, 5), (3, 5), "bool", False),
        {"chunk_key_encoding": {"name": "v2", "separator": "."}},
    ),
]


def _values(spec: Spec, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if spec.dtype == "bool":
        return rng.random(spec.shape) < 0.3
    if spec.dtype == "float32":
        out = rng.normal(50, 10, spec.shape).astype("f4")
        out[rng.random(spec.shape) < 0.2] = np.nan
        return out
    return rng.integers(0, 9, spec.shape).astype(spec.dtype)


def test_chunk_stats_and_select_in_a_new_process_import_no_pandas(tmp_path):
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    values = {}
    for seed, (spec, extra) in enumerate(SPECS):
        array = spec.create(s.store, **extra)
        values[spec.name] = _values(spec, seed)
        array[...] = values[spec.name]
    s.commit("arrays")
    repo.close()
    names = [spec.name for spec, _ in SPECS]
    out = subprocess.run(
        [sys.executable, "-c", READ, str(tmp_path / "repo"), str(tmp_path), *names],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["False", "False"], out.stderr
    plain = values["plain"]
    want = [  # the chunks of `plain` holding a value above 60, as numpy finds them
        f"{i},{j}"
        for i in range(2)
        for j in range(3)
        if (plain[10 * i : 10 * i + 10, 10 * j : 10 * j + 10] > 60).any()
    ]
    assert lines[1].split() == want
    for i, (spec, _) in enumerate(SPECS):
        with pa.memory_map(str(tmp_path / f"{i}.arrow")) as f:
            table = pa.ipc.open_file(f).read_all()
        assert table.column_names[:2] == ["d0", "d1"]
        rows, cols = spec.grid
        assert table["d0"].to_pylist() == np.repeat(np.arange(rows), cols).tolist()
        assert table["d1"].to_pylist() == np.tile(np.arange(cols), rows).tolist()
        assert_matches(table, spec, values[spec.name], spec.name)
