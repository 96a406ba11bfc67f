"""`make test`'s schedule holds (tests/fixtures/schedule.py): under pytest-xdist with
`--dist loadgroup`, each module's tests run in one process and the tests that take the
Spark session in one process, and the longest units start first. pytest 9.2 made xdist
drop every group silently (pytest-xdist#1386: two Spark sessions, module fixtures built
twice); this catches that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import json, os
import pytest

pytest_plugins = ["tests.fixtures.schedule"]

@pytest.fixture(scope="session")
def spark():  # a stand-in: the schedule groups by the fixture's name
    return "spark"

@pytest.fixture(autouse=True)
def record(request):
    yield
    with open(os.environ["RUNS"], "a") as f:
        f.write(json.dumps([request.node.nodeid, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
"""

XDIST = ["-n", "2", "--dist", "loadgroup"]

LONG = """
import pytest

@pytest.mark.slow(seconds=100)
def test_long():
    pass
"""

MODULE = """
import pytest

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass

@pytest.mark.parametrize("i", range(2))
def test_with_spark(spark, i):
    pass
"""


def run_pytest(folder: Path, args: list[str]) -> Path:
    """Run pytest on the test files in `folder` with `args`; the file where each test
    wrote (node id, xdist worker)."""
    runs = folder / "runs.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={"RUNS": str(runs), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return runs


def test_a_module_and_the_spark_tests_each_run_in_one_process(tmp_path):
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        (tmp_path / name).write_text(MODULE)
    (tmp_path / "test_z_long.py").write_text(LONG)  # collected last, one test
    (tmp_path / "conftest.py").write_text(CONFTEST)
    runs = run_pytest(tmp_path, XDIST)
    workers: dict[str, set[str]] = {}
    first: dict[str, str] = {}
    for line in runs.read_text().splitlines():
        nodeid, worker = json.loads(line)
        nodeid = nodeid.split("@")[0]  # xdist's group suffix
        first.setdefault(worker, nodeid)
        group = "spark" if "with_spark" in nodeid else nodeid.split("::")[0]
        workers.setdefault(group, set()).add(worker)
    assert len(workers) == 5  # four modules and the Spark group
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers
    assert {w for ran_on in workers.values() for w in ran_on} == {"gw0", "gw1"}
    # Longest first: the Spark group, then the slow module, though it has one test.
    assert sorted(first.values()) == ["test_a.py::test_with_spark[0]", "test_z_long.py::test_long"]


SPREAD = """
import pytest

@pytest.mark.spread
@pytest.mark.parametrize("i", range(3))
def test_part(i):
    pass

def test_plain():
    pass
"""


def test_the_tests_of_a_spread_function_are_a_unit_each(tmp_path):
    """The seed ranges (tests/sim/test_seeds.py) can run on both processes at once."""
    (tmp_path / "test_s.py").write_text(SPREAD)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    one = ["-n", "1", "--dist", "loadgroup"]  # the unit names are made in a worker's collection
    runs = run_pytest(tmp_path, one)
    nodeids = [json.loads(line)[0] for line in runs.read_text().splitlines()]
    assert len(nodeids) == 4
    # xdist's unit is what follows the last "@" when it comes after the last "]"
    split = [n.rsplit("@", 1) for n in nodeids if n.rfind("@") > n.rfind("]")]
    units = {test.split("::")[1]: unit for test, unit in split}
    assert units.keys() == {"test_part[0]", "test_part[1]", "test_part[2]", "test_plain"}
    assert units["test_plain"] == "test_s.py"
    assert len({units[f"test_part[{i}]"] for i in range(3)} | {"test_s.py"}) == 4
