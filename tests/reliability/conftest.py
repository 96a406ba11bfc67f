"""Fixtures of the reliability tests; their helpers are in tests/helpers/reliability.py."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.helpers.reliability import FIGURES, SOAK


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
