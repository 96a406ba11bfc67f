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


def test_the_examples_type_check_under_mypy_strict(tmp_path: Path):
    examples = tmp_path / "examples"
    examples.mkdir()
    files = example_files(examples)
    assert len(files) >= 10  # every page with Python examples
    (examples / "reveal.py").write_text(REVEAL)
    files.append(examples / "reveal.py")
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
    errors = [line for line in res.stdout.splitlines() if ": error:" in line]
    assert errors == [], res.stdout
    assert 'Revealed type is "zarrlake.repo.Repo"' in res.stdout, res.stdout
    assert 'Revealed type is "zarrlake.session.Session"' in res.stdout, res.stdout
    assert res.returncode == 0 and "Success: no issues found" in res.stdout, res.stdout
