"""The import contracts bind: each kind of wrong import, added to a copy of the package, makes
`lint-imports` (run by `make lint`) fail, and the copy passes without it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

LAYERS = "Layers point down only"
TEST_KIT = "do not import the test kit"
ACYCLIC = "No import cycles between the modules of one package"
ROOT_PACKAGE = "No module imports the root package"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of src/zarrlake and .importlinter; lint-imports run there sees only the copy."""
    shutil.copytree(ROOT / "src" / "zarrlake", tmp_path / "src" / "zarrlake")
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def add_line(root: Path, module: str, line: str) -> None:
    """Append a module-level statement to `module` (dotted name) in the copy."""
    path = root / "src" / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    path.write_text(path.read_text() + f"\n{line}\n")


def sibling_import(root: Path, package: str) -> tuple[str, str]:
    """A module of `package` that imports a sibling at module level: (importer, imported)."""
    folder = root / "src" / package.replace(".", "/")
    for path in sorted(folder.glob("*.py")):
        importer = f"{package}.{path.stem}"
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
                imported = node.module
                if imported != importer and (folder / f"{imported.rsplit('.', 1)[1]}.py").exists():
                    return importer, imported
    raise AssertionError(f"no module of {package} imports a sibling")


def assert_broken(root: Path, contract: str) -> None:
    res = lint(root)
    assert res.returncode != 0, res.stdout
    broken = [line for line in res.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), res.stdout


def test_the_package_as_it_is_keeps_every_contract(package: Path):
    res = lint(package)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("zarrlake.vc.diff", "import zarrlake.repo"),
        ("zarrlake.format.manifest", "import zarrlake.txn"),
        ("zarrlake.storage.base", "import zarrlake.metastore.base"),
    ],
)
def test_an_import_up_the_layers_fails(package: Path, module: str, line: str):
    add_line(package, module, line)
    assert_broken(package, LAYERS)


@pytest.mark.parametrize(
    "module",
    ["zarrlake.vc.diff", "zarrlake.storage.base", "zarrlake.ui.app", "zarrlake.demo.story"],
)
def test_a_name_imported_from_the_root_package_fails(package: Path, module: str):
    """`from zarrlake import Repo` resolves through the root's lazy __getattr__, which hides
    the edge to zarrlake.repo from the layers contract; importing the root is forbidden."""
    add_line(package, module, "from zarrlake import Repo")
    assert_broken(package, ROOT_PACKAGE)


@pytest.mark.parametrize("package_name", ["zarrlake.vc", "zarrlake.txn"])
def test_a_cycle_between_two_modules_of_one_package_fails(package: Path, package_name: str):
    importer, imported = sibling_import(package, package_name)
    add_line(package, imported, f"import {importer}")
    assert_broken(package, ACYCLIC)


@pytest.mark.parametrize(
    "module",
    [
        "zarrlake.cli.data",
        "zarrlake.spark.writer",
        "zarrlake.ui.app",
        "zarrlake.demo.story",
        "zarrlake.repo",
        "zarrlake.vc.objects",
    ],
)
def test_an_import_of_the_test_kit_fails(package: Path, module: str):
    add_line(package, module, "from zarrlake.testing.faults import FaultDice")
    assert_broken(package, TEST_KIT)
