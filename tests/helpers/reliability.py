"""Reliability suites: sizes (CI or soak), and the figures every suite adds to.

`ZARRLAKE_SOAK=1` (make soak) selects the larger settings. Each suite adds its counts to
the session-wide `figures` (transactions run, processes, faults injected, kills, corruptions
tried, bad inputs tried, lost and phantom commits found); they are printed at the end of the
run and written to <pytest basetemp>/reliability-figures.json."""

from __future__ import annotations

import os
from collections import Counter

SOAK = os.environ.get("ZARRLAKE_SOAK") == "1"


FIGURES: Counter[str] = Counter()


def size(ci: int, soak: int) -> int:
    """The CI setting, or the soak setting under ZARRLAKE_SOAK=1."""
    return soak if SOAK else ci
