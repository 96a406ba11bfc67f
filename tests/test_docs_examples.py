"""The site's how-to examples of cooperative writes run as written, each in a fresh
directory, as the user would run them (a script: worker processes import it)."""

from __future__ import annotations

import re
from pathlib import Path

import zarr

import zarrlake as zl
from tests.test_readme import run_script

DOCS = Path(__file__).resolve().parents[1] / "docs"


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of a docs page, in order."""
    text = (DOCS / page).read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def test_the_dask_how_to_runs_as_written_and_leaves_no_session(tmp_path):
    (code,) = python_blocks("how-to/dask.md")
    assert "flush" not in code  # a task needs nothing beyond writing
    res = run_script(code, tmp_path)
    assert res.stdout.strip().splitlines()[-1] == "nightly job"
    repo = zl.Repo.open(tmp_path / "myrepo")
    assert repo.list_sessions() == []
    t = zarr.open_array(repo.readonly_session().store, path="t", mode="r")
    assert t.shape == (720, 100)
    assert [t[24 * day, 0] for day in range(30)] == [float(day) for day in range(30)]
    repo.close()


def test_the_multiprocessing_how_to_runs_as_written(tmp_path):
    (code,) = python_blocks("how-to/multiprocessing.md")
    res = run_script(code, tmp_path)
    assert res.stdout.strip().splitlines()[-1] == "[0. 1. 2. 3. 4. 5. 6. 7.]"
    repo = zl.Repo.open(tmp_path / "mp-repo")
    assert [c.message for c in repo.log()][:1] == ["hourly run"]
    assert repo.list_sessions() == []
    repo.close()
