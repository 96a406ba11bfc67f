"""The Python examples of the README and of the site type-check under `mypy --strict`, as a
user's code that imports zarrlake would: the library's annotations are what they meet
(zarrlake is followed silently, as an installed typed package is), and
`reveal_type(zl.Repo.open(...))` is `Repo`. One mypy run over every example."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.examples import ROOT, code_blocks, pages

CONFIG = """\
[mypy]
strict = True
cache_dir = {cache}
untyped_calls_exclude = distributed

[mypy-zarrlake.*]
follow_imports = silent

[mypy-pyspark.*,pyarrow.*,pandas.*,xarray.*,dask.*,distributed.*,virtualizarr.*,obspec_utils.*]
follow_imports = skip
ignore_missing_imports = True
"""
"""zarrlake's own modules are read for their types but their errors are not the user's
(as for a package installed with py.typed). The big untyped or partly typed libraries the
examples also use are not analysed (their names are Any): their typing is not ours to
fix, and analysing them would take minutes."""

REVEAL = """\
import zarrlake as zl

reveal_type(zl.Repo.open("r"))
reveal_type(zl.Repo.open("r").create_session())
"""

TYPOS = """\
import zarrlake as zl

zl.Rpeo.open("r")
zl.ConflictErorr
zl.checks.ValueRange
"""
"""A user's misspelt names: a type checker must reject them, not see `Any`."""


def example_files(where: Path) -> list[Path]:
    """Each ```python block of the README and the site as a module of its own; a block
    that continues an earlier one (it uses `zl` without importing it) gets the import, and
    its placeholder `{...}` ("as above") an empty dict."""
    files = []
    for page in pages():
        for i, (_, code) in enumerate(code_blocks(page, "python")):
            if "zl." in code and "import zarrlake as zl" not in code:
                code = "import zarrlake as zl\n\n" + code.replace("={...}", "={}")
            name = re.sub(r"\W+", "_", f"{page.removesuffix('.md')}_{i}").strip("_").lower()
            path = where / f"{name}.py"
            path.write_text(code)
            files.append(path)
    return files


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What one `mypy --strict` run prints over every example, the reveals and the typos."""
    tmp_path = tmp_path_factory.mktemp("types")
    examples = tmp_path / "examples"
    examples.mkdir()
    files = example_files(examples)
    assert len(files) >= 10  # every page with Python examples
    for name, code in (("reveal.py", REVEAL), ("typos.py", TYPOS)):
        (examples / name).write_text(code)
        files.append(examples / name)
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG.format(cache=tmp_path / "cache"))
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(config), *map(str, files)],
        cwd=examples,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return res.stdout


def test_the_examples_type_check_under_mypy_strict(mypy_output: str):
    errors = [
        line
        for line in mypy_output.splitlines()
        if ": error:" in line and not line.startswith("typos.py")
    ]
    assert errors == [], mypy_output
    assert 'Revealed type is "zarrlake.repo.Repo"' in mypy_output, mypy_output
    assert 'Revealed type is "zarrlake.session.Session"' in mypy_output, mypy_output


def test_a_misspelt_name_is_a_type_error(mypy_output: str):
    errors = [line for line in mypy_output.splitlines() if line.startswith("typos.py")]
    assert len(errors) == 2, mypy_output
    assert 'Module has no attribute "Rpeo"' in errors[0], errors
    assert 'Module has no attribute "ConflictErorr"' in errors[1], errors
