"""Local-directory object storage passes the conformance suites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zarrlake.testing.storage import ObjectStoreTests, SharedObjectStoreTests
from zarrlake.testing.storage_retries import RetriedObjectStoreTests


class TestLocalObjectStore(ObjectStoreTests, SharedObjectStoreTests, RetriedObjectStoreTests):
    object_and_prefix_may_share_a_name = False

    @pytest.fixture
    def location(self, tmp_path: Path) -> tuple[str, dict[str, Any]]:
        return str(tmp_path / "objects"), {}
