"""`reach.committed_keeps`: which of the object keys a commit's clean-up asks about the
commit kept, looked up in the digest columns of the manifest ranges it wrote (not by
naming every entry of those ranges). The answers are checked against keys computed
from the written bytes' digests."""

from __future__ import annotations

import hashlib

import numpy as np

import zarrlake as zl
from tests.helpers.lifecycle import chunk
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.format.digest import DEFAULT, digest
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.reach import committed_keeps


def key(data: bytes) -> str:
    return chunk_object_key(digest(DEFAULT, data))


def test_kept_chunks_among_few_and_many_keys(tmp_path) -> None:
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    s.write_many([(f"a/c/{i}", chunk(i)) for i in range(40)])
    s.flush()
    s.write("a/c/0", chunk(1000))  # overwritten in the same session: not kept
    cid = s.commit("one")
    s.wait()
    objects = repo._context.objects
    written = {key(chunk(1000))} | {key(chunk(i)) for i in range(1, 40)}
    gone = key(chunk(0))
    # one key at a time, as a one-chunk commit's clean-up asks
    assert committed_keeps(objects, cid, [key(chunk(7))]) == {key(chunk(7))}
    assert committed_keeps(objects, cid, [gone]) == set()
    # a digest sharing the first 8 bytes of a kept one, the rest different
    near = key(chunk(7))[: len("chunks/") + 16] + "0" * 48
    assert near != key(chunk(7))
    assert committed_keeps(objects, cid, [near]) == set()
    # many keys at once: the kept among thousands that are not
    strangers = [f"chunks/{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(3000)]
    asked = [*strangers, gone, near, *sorted(written)]
    assert committed_keeps(objects, cid, asked) == written
    # keys that are no chunk object's (upper-case hex, spaced, too short, another kind)
    spaced = "chunks/  " + " ".join(key(chunk(3))[7:][i : i + 2] for i in range(0, 42, 2))
    assert len(spaced) == len(key(chunk(3)))
    odd = [key(chunk(3)).upper(), spaced, "chunks/abc", "fragments/x"]
    assert committed_keeps(objects, cid, odd) == set()
    assert committed_keeps(objects, cid, []) == set()
    repo.close()


def test_the_object_entries_of_the_ranges_the_commit_wrote(tmp_path) -> None:
    """The answer is the asked keys among the object entries of the ranges the commit wrote
    (those its parent's snapshot lacks), read from their columns here: the parent's chunks
    in a range the commit rewrote count as kept."""
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    s.write_many(
        [(f"{name}/c/{i}", chunk(10 * i + len(name))) for name in ("a", "bb") for i in range(5)]
    )
    s.commit("one")
    s.wait()
    s = repo.create_session()
    s.write("a/c/9", chunk(99))
    cid = s.commit("two")
    s.wait()
    objects = repo._context.objects
    rec = objects.read_commit(cid)
    old = set(objects.read(SnapshotRoot, objects.read_commit(rec.parents[0]).snapshot).ranges.ids)
    new = [m for m in objects.read(SnapshotRoot, rec.snapshot).ranges.ids if m not in old]
    expected = set()
    for m in new:
        rng = objects.read(ManifestRange, m)
        rows = np.asarray(rng.digest)[np.asarray(rng.kind) == RefKind.OBJECT]
        expected |= {"chunks/" + bytes(row).hex() for row in rows}
    asked = [key(chunk(99))] + [key(chunk(10 * i + n)) for n in (1, 2) for i in range(5)]
    assert key(chunk(99)) in expected
    assert committed_keeps(objects, cid, asked) == expected & set(asked)
    repo.close()
