"""Custom checks: callables found through a real entry point (a distribution with an
entry_points.txt put on sys.path), given the CheckContext and the rule's parameters."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import zarrlake as zl
from tests.checks.conftest import write
from zarrlake.checks import Custom

MODULE = '''
import numpy as np
from zarrlake.checks import Outcome


def mean_below(ctx, array, limit):
    """The changed chunks of `array` average below `limit`; reads them through ctx."""
    coords = ctx.written(array)
    values = [data for _, data in ctx.chunks(array, coords)]
    mean = float(np.mean(np.concatenate([v.ravel() for v in values]))) if values else 0.0
    if mean >= limit:
        return Outcome.fail(f"mean {mean:g} >= {limit}", array, coords)
    assert ctx.new[array].shape == ctx.old[array].shape
    return True, f"mean {mean:g}"


def units_kelvin(ctx):
    return ctx.new["t"].attrs.get("units") == "K"


def broken(ctx):
    raise RuntimeError("bug in the check")


def wrong_answer(ctx):
    return 42
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A distribution `zl-test-checks` registering four checks in group zarrlake.checks."""
    root = tmp_path / "site"
    dist = root / "zl_test_checks-1.0.dist-info"
    dist.mkdir(parents=True)
    (root / "zl_test_checks.py").write_text(MODULE)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zl-test-checks\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [zarrlake.checks]
            mean-below = zl_test_checks:mean_below
            units-kelvin = zl_test_checks:units_kelvin
            broken = zl_test_checks:broken
            wrong-answer = zl_test_checks:wrong_answer
            """
        )
    )
    monkeypatch.syspath_prepend(str(root))
    return root


def test_a_custom_check_gates_commits(repo, plugin):
    repo.add_check("mean", Custom("mean-below", array="t", limit=10))
    repo.add_check("kelvin", Custom("units-kelvin"))
    assert write(repo, t={0: 5.0}).commit("fine")
    s = write(repo, t={1: 50.0, 2: 50.0})
    with pytest.raises(zl.ChecksFailedError, match=r"'mean' \(custom\).*mean 50 >= 10") as e:
        s.commit("too warm")
    assert e.value.results[0].chunks == [(1, 0), (2, 0)]
    passed = repo.run_checks("main")
    assert [(r.name, r.passed) for r in passed] == [("kelvin", True), ("mean", True)]
    assert passed[1].message == "mean 5"


def test_a_failing_or_misbehaving_custom_check_fails_closed(repo, plugin):
    cid = write(repo, t={0: np.float64(3)}).commit("x")
    repo.add_check("broken", Custom("broken"), branches=("nowhere",))
    repo.add_check("wrong", Custom("wrong-answer"), branches=("nowhere",))
    (broken,) = repo.run_checks(cid, names=["broken"])
    assert not broken.passed and "bug in the check" in broken.message
    with pytest.raises(zl.InvalidInputError, match="returned 42"):
        repo.run_checks(cid, names=["wrong"])


def test_an_unknown_entry_point_is_named(repo, plugin, tmp_path):
    with pytest.raises(zl.NotFoundError, match=r"no custom check 'nope'.*mean-below"):
        repo.add_check("n", Custom("nope"))
    # a rule whose plugin is not installed in this client fails closed, naming it
    repo.add_check("m", Custom("mean-below", array="t", limit=10))
    import sys

    sys.path.remove(str(plugin))
    with pytest.raises(zl.ChecksFailedError, match="no custom check 'mean-below'"):
        write(repo, t={0: 4.0}).commit("x")
