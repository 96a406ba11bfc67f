"""Reliability suites: sizes (CI or soak), and the figures every suite adds to.

`ZARRLAKE_SOAK=1` (make soak) selects the larger settings. Each suite adds its counts to
the session-wide `figures` (transactions run, processes, faults injected, kills, corruptions
tried, bad inputs tried, lost and phantom commits found); they are printed at the end of the
run and written to <pytest basetemp>/reliability-figures.json.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

SOAK = os.environ.get("ZARRLAKE_SOAK") == "1"

FIGURES: Counter[str] = Counter()


def size(ci: int, soak: int) -> int:
    """The CI setting, or the soak setting under ZARRLAKE_SOAK=1."""
    return soak if SOAK else ci


@pytest.fixture
def figures() -> Counter[str]:
    return FIGURES


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not FIGURES:
        return
    terminalreporter.section("zarrlake reliability figures" + (" (soak)" if SOAK else ""))
    for name in sorted(FIGURES):
        terminalreporter.write_line(f"{name:>32}: {FIGURES[name]}")
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        path = factory.getbasetemp() / "reliability-figures.json"
        path.write_text(json.dumps(dict(sorted(FIGURES.items())), indent=1))
        terminalreporter.write_line(f"written to {path}")
