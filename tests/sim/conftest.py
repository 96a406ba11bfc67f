"""Simulator tests: the seed counts that caught each planted bug, printed at the end."""

from __future__ import annotations

from collections import Counter

import pytest

FIGURES: Counter[str] = Counter()


@pytest.fixture
def figures() -> Counter[str]:
    return FIGURES


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if FIGURES:
        terminalreporter.section("zarrlake simulator figures")
        for name in sorted(FIGURES):
            terminalreporter.write_line(f"{name:>60}: {FIGURES[name]}")
