"""No import cycles between the modules of `benchmarks`: shared helpers live below the
workloads (benchmarks/arrays.py), and a group module never imports workloads.py back. The
check counts function-level imports too (grimp sees every import statement)."""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def import_cycles(package: str) -> list[list[str]]:
    """The strongly connected groups of two or more modules of `package` (Tarjan's algorithm
    over grimp's import graph); each is a cycle of imports between modules."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_the_benchmark_modules_import_each_other_without_cycles(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))
    assert import_cycles("benchmarks") == []


def test_a_cycle_through_a_function_level_import_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The check would see the old s3pg <-> workloads cycle: one side imports the other
    inside a function."""
    package = tmp_path / "cyclic_bench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workloads.py").write_text(
        "def run():\n    from cyclic_bench.s3pg import rt\n    return rt()\nARRAY = 'a'\n"
    )
    (package / "s3pg.py").write_text("from cyclic_bench.workloads import ARRAY\n")
    (package / "report.py").write_text("from cyclic_bench import s3pg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert import_cycles("cyclic_bench") == [["cyclic_bench.s3pg", "cyclic_bench.workloads"]]
    finally:
        sys.modules.pop("cyclic_bench", None)
