"""The package is typed for its users: it ships `py.typed`, and the names `import zarrlake`
loads on first use are visible to type checkers (imported under `TYPE_CHECKING`, re-exported
explicitly), while importing the package still loads none of them."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import zarrlake

ROOT = Path(__file__).resolve().parents[1]
INIT = Path(zarrlake.__file__)


def test_the_package_ships_py_typed():
    assert (INIT.parent / "py.typed").exists()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["zarrlake"]


def type_checking_reexports() -> dict[str, str]:
    """{name: module} of the `from module import name as name` lines under TYPE_CHECKING."""
    tree = ast.parse(INIT.read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    ]
    out = {}
    for node in block.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname == alias.name:  # explicit re-export (mypy --strict)
                    out[alias.name] = (
                        node.module if node.module != "zarrlake" else f"zarrlake.{alias.name}"
                    )
    return out


def test_every_lazy_name_is_visible_to_type_checkers():
    seen = type_checking_reexports()
    assert {name: seen.get(name) for name in zarrlake._LAZY} == zarrlake._LAZY
    assert seen["spark"] == "zarrlake.spark" and seen["virtual"] == "zarrlake.virtual"
    assert seen["checks"] == "zarrlake.checks"


def test_importing_the_package_loads_no_lazy_module():
    code = (
        "import sys, zarrlake; "
        "print(sorted({'zarr', 'numpy', *zarrlake._LAZY.values()} & set(sys.modules)))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]"


def test_dir_lists_the_public_names_only():
    names = dir(zarrlake)
    assert "Repo" in names and "spark" in names and "ConflictError" in names
    assert "importlib" not in names and "_importlib" not in names and "TYPE_CHECKING" not in names
    assert set(names) == {*zarrlake.__all__, "__version__", "checks", "spark", "virtual"}
