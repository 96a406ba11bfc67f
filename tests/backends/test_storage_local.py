"""Local-directory object storage passes the conformance suites."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zarrlake.errors import ConfigurationError, StorageError
from zarrlake.storage import open_storage
from zarrlake.storage.local import LocalObjectStore
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


def test_a_direct_put_unlinks_nothing_a_create_unlinks_its_staged_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put renames its staged file onto the key (nothing left to unlink: an unlink would
    fail, one syscall per put); a create links it, then unlinks the staged name."""
    import os

    store = open_storage(str(tmp_path / "objects"))
    unlinked: list[str] = []
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        unlinked.append(str(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    store.put("refs/main", b"one")
    store.put("refs/main", b"two")
    assert unlinked == []
    assert store.put_if_absent("chunks/ab", b"mine") is True
    assert len(unlinked) == 1 and "chunks/ab#" in unlinked[0]
    assert store.put_if_absent("chunks/ab", b"again") is False
    assert len(unlinked) == 2
    monkeypatch.undo()
    files = sorted(p.name for p in (tmp_path / "objects").rglob("*") if p.is_file())
    assert files == ["ab", "main"]
    assert store.get("refs/main") == b"two"


def test_a_sealed_bin_refuses_every_later_move_and_gives_back_what_it_held(tmp_path: Path) -> None:
    """A sweep's bin on a local directory (vc/sweep_fence.py): a move needs the bin; sealing
    renames it away and puts its objects back; a move after the seal changes nothing."""
    store = open_storage(str(tmp_path / "r"), retry_policy=None)
    local = store if isinstance(store, LocalObjectStore) else store.inner
    assert isinstance(local, LocalObjectStore)
    for key in ("chunks/a", "chunks/b", "manifests/c"):
        store.put(key, key.encode())
    local.open_bin("000000000007")
    assert local.move_to_bin("000000000007", ["chunks/a", "manifests/c", "chunks/gone"]) == [
        "chunks/a",
        "manifests/c",
    ]
    assert not store.exists("chunks/a") and not store.exists("manifests/c")
    assert "chunks/a" not in list(store.list("chunks/"))
    local.seal_bin("000000000007")
    assert local.move_to_bin("000000000007", ["chunks/b"]) is None  # sealed: refused
    assert [store.get(k) for k in ("chunks/a", "chunks/b", "manifests/c")] == [
        b"chunks/a",
        b"chunks/b",
        b"manifests/c",
    ]
    local.seal_bin("000000000007")  # again: nothing left to do
    assert local.bins() == []
    local.open_bin("000000000008")
    assert local.move_to_bin("000000000008", ["chunks/b"]) == ["chunks/b"]
    local.empty_bin("000000000008")  # its sweep ended itself: the object goes for good
    assert not store.exists("chunks/b") and local.bins() == []


LARGE_COMMIT = """
import os, sys
from pathlib import Path
import numpy as np, zarr, zarrlake as zl
from zarrlake.storage.local import DIRECT_WRITE_MAX
root = Path(sys.argv[1])
repo = zl.Repo.create(root)
s = repo.create_session()
a = zarr.create_array(s.store, name="a/long/path/to/the/array", shape=(12000,), chunks=(1,),
                      dtype="float32", compressors=None, fill_value=-1.0)
values = np.arange(12000, dtype=np.float32)
for lo in range(0, 12000, 2000):  # fragments under DIRECT_WRITE_MAX: written directly too
    a[lo : lo + 2000] = values[lo : lo + 2000]
    s.flush()
before = "obstore" in sys.modules
s.commit("12,000 chunks")
largest = max(p.stat().st_size for p in (root / "manifests").iterdir())
back = zarr.open_array(repo.readonly_session().store, path="a/long/path/to/the/array")[:]
print(before, "obstore" in sys.modules, largest > DIRECT_WRITE_MAX, np.array_equal(back, values))
"""


def test_a_commit_writes_its_large_manifests_without_obstore(tmp_path: Path) -> None:
    """A commit's manifest ranges (4,096 entries: over 256 KiB here) are written on their
    files like small objects: a local commit never loads obstore (its import and first
    call cost several milliseconds inside the commit). A new process commits 12,000 chunks
    and says what it loaded; the array reads back as numpy wrote it."""
    out = subprocess.run(
        [sys.executable, "-c", LARGE_COMMIT, str(tmp_path / "repo")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stderr
