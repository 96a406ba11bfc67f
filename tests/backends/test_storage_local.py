"""Local-directory object storage passes the conformance suites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zarrlake.errors import ConfigurationError
from zarrlake.storage import open_storage
from zarrlake.testing.storage import (
    ForkedObjectStoreTests,
    ObjectStoreTests,
    SharedObjectStoreTests,
)
from zarrlake.testing.storage_retries import RetriedObjectStoreTests


class TestLocalObjectStore(
    ObjectStoreTests, SharedObjectStoreTests, RetriedObjectStoreTests, ForkedObjectStoreTests
):
    object_and_prefix_may_share_a_name = False

    @pytest.fixture
    def location(self, tmp_path: Path) -> tuple[str, dict[str, Any]]:
        return str(tmp_path / "objects"), {}


def test_local_directory_has_no_conditional_updates(tmp_path: Path) -> None:
    """A metastore cannot live in a local directory (obstore has no replace-if-unchanged
    there): the refusal names SQLite, the metastore local repositories use."""
    store = open_storage(str(tmp_path / "objects"))
    store.put("k", b"v")
    for call in (lambda: store.get_tagged("k"), lambda: store.put_if("k", b"w", None)):
        with pytest.raises(ConfigurationError, match="SQLite"):
            call()
