"""open_storage: locations, sharing by name, retrying by default, the scheme registry."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from zarrlake import storage
from zarrlake.storage import ObjectStore, open_storage
from zarrlake.storage.obstore import ObstoreObjectStore
from zarrlake.storage.retrying import RetryingObjectStore


def test_memory_stores_are_shared_by_name() -> None:
    name = f"memory://shared-{uuid.uuid4().hex}"
    first, second = open_storage(name), open_storage(name)
    first.put("k", b"v")
    assert second.get("k") == b"v"
    other = open_storage(f"memory://other-{uuid.uuid4().hex}")
    assert not other.exists("k")


def test_local_directory_created_and_file_url_equivalent(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "repo dir"
    store = open_storage(str(root))
    assert root.is_dir()
    store.put("a/b", b"x")
    assert (root / "a" / "b").read_bytes() == b"x"
    again = open_storage(root.as_uri())
    assert again.get("a/b") == b"x"
    assert again.url == store.url == root.as_uri()


def test_open_storage_retries_by_default(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path))
    assert isinstance(store, RetryingObjectStore)
    assert isinstance(store.inner, ObstoreObjectStore)
    assert isinstance(open_storage(str(tmp_path), retry_policy=None), ObstoreObjectStore)


def test_registered_scheme_opens_through_its_factory() -> None:
    opened: list[tuple[str, dict[str, Any]]] = []

    def factory(location: str, options: dict[str, Any]) -> ObjectStore:
        opened.append((location, options))
        return open_storage("memory://" + location.split("://", 1)[1], retry_policy=None)

    scheme = f"test{uuid.uuid4().hex[:8]}"
    storage.register(scheme, factory)
    store = open_storage(f"{scheme}://x-{scheme}", flavour="plain")
    assert opened == [(f"{scheme}://x-{scheme}", {"flavour": "plain"})]
    assert isinstance(store, RetryingObjectStore)
    store.put("k", b"v")
    assert open_storage(f"memory://x-{scheme}").get("k") == b"v"
