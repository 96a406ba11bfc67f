"""Local-directory object storage passes the conformance suites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zarrlake.errors import ConfigurationError, StorageError
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


def test_direct_writes_agree_with_obstore_and_leave_no_staged_files(tmp_path: Path) -> None:
    """Plain keys are written on their file directly (faster than obstore's runtime): what
    one writes the other reads, an object either made is never replaced by a create, and
    no half-written file (`<key>#<n>`) stays behind, also after a refused write."""
    import obstore
    from obstore.store import LocalStore

    root = tmp_path / "objects"
    store = open_storage(str(root))
    assert store.put_if_absent("chunks/ab/cd", b"mine") is True
    store.put("refs/main", b"one")
    store.put("refs/main", b"two")
    other = LocalStore(str(root))
    assert bytes(obstore.get(other, "chunks/ab/cd").bytes()) == b"mine"
    assert bytes(obstore.get(other, "refs/main").bytes()) == b"two"
    obstore.put(other, "chunks/ef", b"theirs")
    assert store.put_if_absent("chunks/ef", b"mine") is False
    assert store.get("chunks/ef") == b"theirs"
    with pytest.raises(StorageError, match="cannot hold both"):
        store.put_if_absent("chunks/ab/cd/x", b"under an object")
    with pytest.raises(StorageError, match="cannot hold both"):
        store.put("chunks/ab", b"over a directory")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["chunks/ab/cd", "chunks/ef", "refs/main"]
