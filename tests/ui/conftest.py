"""Fixtures of the ui tests; their helpers are in tests/helpers/ui.py."""

from __future__ import annotations

import pytest

from tests.helpers.ui import Built, build


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("ui") / "repo")
