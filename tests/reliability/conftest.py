"""Fixtures of the reliability tests; their helpers are in tests/helpers/reliability.py, and
tests/fixtures/figures.py prints the figures they count."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers.reliability import FIGURES


@pytest.fixture
def figures() -> Counter[str]:
    return FIGURES
