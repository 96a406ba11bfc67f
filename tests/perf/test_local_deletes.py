"""A local directory's bulk delete unlinks plain keys' files itself (a gc deletes one
object per garbage chunk; obstore's local deletes cost twice as much), and its listing
checks all names at once: both as obstore would answer."""

from __future__ import annotations

from pathlib import Path

import obstore
import pytest

from zarrlake.storage import open_storage
from zarrlake.storage.local import LocalObjectStore


def test_delete_many_unlinks_plain_keys_without_obstore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_storage(str(tmp_path))
    keys = [f"chunks/{i:064x}" for i in range(20)]
    for key in keys:
        store.put(key, b"x")
    calls: list[object] = []
    monkeypatch.setattr(obstore, "delete", lambda *a: calls.append(a))
    store.delete_many([*keys[:15], "chunks/missing"])  # a missing key is no error
    assert calls == []
    assert sorted(store.list("chunks/")) == keys[15:]
    assert not (tmp_path / keys[0]).exists()


def test_listing_falls_back_to_obstore_for_an_unplain_name(tmp_path: Path) -> None:
    store = open_storage(str(tmp_path))
    store.put("chunks/aa", b"x")
    store.put("chunks/bb", b"y")
    (tmp_path / "chunks" / "c#1").write_bytes(b"half")  # a half-written file: not listed
    assert sorted(store.list("chunks/")) == ["chunks/aa", "chunks/bb"]
    (tmp_path / "chunks" / "d e").write_bytes(b"z")  # a name obstore escapes
    local = store
    while not isinstance(local, LocalObjectStore):
        local = local.inner  # through the retrying wrapper
    assert local._walk("chunks/") is None  # the whole listing goes through obstore
    assert "chunks/aa" in set(store.list("chunks/"))
