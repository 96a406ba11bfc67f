"""Suite 5: corruption. Bytes are flipped in, objects truncated and deleted from every kind
of stored object (chunk objects, packs, manifest ranges, snapshots, change sets, commit
records). Reads raise CorruptionError or NotFoundError naming the object and never return
wrong bytes; check_repo reports every case, naming the object."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.format.chunk_ref import RefKind, chunk_object_key

ARRAYS = {"big": (4096, 2048), "mid": (400, 100), "tiny": (8, 4)}


def _write(repo: zl.Repo, scale: int) -> str:
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    for name, (n, c) in ARRAYS.items():
        arr = root.require_array(name, shape=(n,), chunks=(c,), dtype="<i8", compressors=None)
        arr[:] = np.arange(n, dtype="<i8") * scale + 3
    return s.commit(f"scale {scale}")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, dict[str, bytes], dict[str, str]]:
    """A repository with two commits, its data by key, and one object of each kind."""
    path = tmp_path_factory.mktemp("corruption") / "repo"
    repo = zl.Repo.create(path)
    first = _write(repo, 1)
    head = _write(repo, 5)
    s = repo.readonly_session("main")
    data = {k: s.read(k) for k in s.list_prefix("")}
    big, mid = s._engine.lookup("big/c/0"), s._engine.lookup("mid/c/1")
    assert big.kind == RefKind.OBJECT and mid.kind == RefKind.LOCATION
    assert s._engine.lookup("tiny/c/0").kind == RefKind.INLINE
    rec = repo._context.objects.read_commit(head)
    targets = {
        "chunk": chunk_object_key(big.digest),
        "pack": mid.location,
        "manifest": f"manifests/{repo._snapshot_of(head).ranges.ids[0]}",
        "snapshot": f"snapshots/{rec.snapshot}",
        "changes": f"changes/{rec.changes}",
        "commit": f"commits/{head}",
        "parent commit": f"commits/{first}",
    }
    repo.close()
    return path, data, targets


def _flip(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x5A
    p.write_bytes(bytes(b))


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "flip": _flip,
    "truncate": _truncate,
    "delete": Path.unlink,
}


def _read_everything(repo: zl.Repo, data: dict[str, bytes]) -> list[Exception]:
    """Read history, every key and every array; return the errors (wrong bytes fail here)."""
    errors: list[Exception] = []
    try:
        repo.log("main")
    except zl.ZarrLakeError as e:
        errors.append(e)
    try:
        s = repo.readonly_session("main")
    except zl.ZarrLakeError as e:
        return [*errors, e]
    for key, expected in data.items():
        try:
            got = s.read(key)
        except (zl.CorruptionError, zl.NotFoundError) as e:
            errors.append(e)
            continue
        assert got == expected, f"{key} returned wrong bytes"
    for name, (n, _) in ARRAYS.items():
        try:
            got = zarr.open_array(s.store, path=name, mode="r")[:]
        except zl.ZarrLakeError as e:
            errors.append(e)
            continue
        np.testing.assert_array_equal(got, np.arange(n, dtype="<i8") * 5 + 3)
    return errors


@pytest.mark.parametrize("mutation", list(MUTATIONS))
@pytest.mark.parametrize(
    "target", ["chunk", "pack", "manifest", "snapshot", "changes", "commit", "parent commit"]
)
def test_corruption_is_detected_and_named(template, target, mutation, tmp_path, figures):
    src, data, targets = template
    path = tmp_path / "repo"
    shutil.copytree(src, path)
    obj = targets[target]
    MUTATIONS[mutation](path / obj)
    figures["corruption: corruptions tried"] += 1

    repo = zl.Repo.open(path)
    errors = _read_everything(repo, data)
    oid = obj.split("/", 1)[1]
    if target != "changes":  # change sets are read by conflict checks and diffs, not reads
        assert errors, f"{mutation} of {obj} went unnoticed by reads"
        for e in errors:
            assert isinstance(e, zl.CorruptionError | zl.NotFoundError), repr(e)
            assert oid in str(e), f"error does not name {obj}: {e}"
        if mutation == "delete":
            assert any(isinstance(e, zl.NotFoundError) for e in errors)
        else:
            assert any(isinstance(e, zl.CorruptionError) for e in errors)

    problems = repo.fsck()
    assert problems, f"check_repo missed the {mutation} of {obj}"
    assert all(oid in p.object for p in problems), problems
    assert {p.kind for p in problems} == {"missing" if mutation == "delete" else "corrupt"}
    figures["corruption: detected by check_repo"] += 1
