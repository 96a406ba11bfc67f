"""Simulator tests: the seed counts that caught each planted bug, printed at the end by
tests/fixtures/figures.py."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.fixtures.figures import SIMULATOR as FIGURES


@pytest.fixture
def figures() -> Counter[str]:
    return FIGURES
