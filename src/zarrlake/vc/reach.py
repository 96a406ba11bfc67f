"""Reachability: which objects the repository still needs (the mark of mark-and-sweep).

Live are the objects reachable from branch heads, tags and session bases, following every
parent of every commit but stopping at commits whose history was expired, plus the chunk
objects that staged records of open or committing sessions refer to. Each commit, snapshot
and manifest range is read once per collector, so marking again after new commits costs
only the new objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import numpy as np

from zarrlake.errors import ExpiredHistoryError, NotFoundError
from zarrlake.format.changes import ChangeSet
from zarrlake.format.chunk_ref import ChunkRef, RefKind, chunk_object_key
from zarrlake.format.commit import CommitRecord
from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.objects import Objects, prefix_of

KINDS = ("chunks", "packs", "fragments", "manifests", "snapshots", "changes", "commits")
"""Object kinds by key prefix, data first."""
WRITTEN_BY_COMMITS = frozenset({"packs", "manifests", "snapshots", "changes", "commits"})
EXPIRED_PREFIX = "expired/"
"""Markers `expired/<commit id>` name commits whose history was expired."""


def kind_of(key: str) -> str:
    """The kind of a storage key: its first path segment (`chunks`, `manifests`, ...)."""
    return key.split("/", 1)[0]


def ref_key(ref: ChunkRef) -> str | None:
    """The object key a chunk reference reads from (None for inline bytes)."""
    if ref.kind == RefKind.OBJECT:
        return chunk_object_key(ref.digest)
    if ref.kind == RefKind.LOCATION:
        return ref.location
    return None


def manifest_refs(rng: ManifestRange) -> dict[str, int]:
    """Object keys a manifest range refers to, with the bytes each must hold at least."""
    kinds = np.asarray(rng.kind)
    objs = np.flatnonzero(kinds == RefKind.OBJECT)
    hexes = np.ascontiguousarray(rng.digest[objs]).tobytes().hex()
    keys = ["chunks/" + hexes[i : i + 64] for i in range(0, len(hexes), 64)]
    out = dict(zip(keys, np.asarray(rng.length)[objs].tolist(), strict=True))
    located = np.flatnonzero(kinds == RefKind.LOCATION)
    if len(located):
        locs = np.asarray(rng.loc)[located]
        ends = np.asarray(rng.offset)[located] + np.asarray(rng.length)[located]
        for loc in np.unique(locs).tolist():
            out[rng.locations[loc]] = int(ends[locs == loc].max())
    return out


def committed_keeps(objects: Objects, commit_id: str, keys: Iterable[str]) -> set[str]:
    """Those of the object `keys` that commit `commit_id` refers to through the manifest
    ranges it wrote (those its first parent's snapshot lacks): what its session uploaded
    and it kept. While the commit is reachable they are live; once not, they are found
    through it (a dropped ref registers it, expire marks it), so they need no candidate
    record of their own. Chunk objects are looked up in the ranges' digest columns: the
    cost follows the keys asked about, not the sizes of the ranges (a one-chunk commit
    rewrites a range that grows with the history)."""
    wanted: dict[bytes, str] = {}
    others: set[str] = set()
    for key in keys:
        hexed = key[len(_CHUNKS) :] if key.startswith(_CHUNKS) else ""
        if len(hexed) == 64 and hexed == hexed.lower():
            with contextlib.suppress(ValueError):
                digest = bytes.fromhex(hexed)
                if len(digest) == 32:  # (fromhex skips spaces)
                    wanted[digest] = key
                    continue
        others.add(key)
    if not wanted and not others:
        return set()
    rec = objects.read_commit(commit_id)
    ranges: Sequence[str] = objects.read(SnapshotRoot, rec.snapshot).ranges.ids
    if rec.parents:
        parent = objects.read_commit(rec.parents[0])
        old = set(objects.read(SnapshotRoot, parent.snapshot).ranges.ids)
        ranges = [m for m in ranges if m not in old]
    out: set[str] = set()
    for m in ranges:  # in turn: a commit's clean-up runs on the pool `map` would use
        rng = objects.read(ManifestRange, m)
        if wanted:
            for d in _objects_among(rng, list(wanted)):
                out.add(wanted.pop(d))
        if others and others & set(rng.locations):
            located = np.asarray(rng.loc)[np.asarray(rng.kind) == RefKind.LOCATION]
            used = {rng.locations[i] for i in np.unique(located).tolist()}
            out |= others & used
            others -= used
        if not wanted and not others:
            break
    return out


_CHUNKS = "chunks/"


def _objects_among(rng: ManifestRange, digests: list[bytes]) -> list[bytes]:
    """Those of `digests` (32 bytes each) that entries of `rng` name as chunk objects: each
    entry's first 8 digest bytes, as an integer, searched among the sorted ones of
    `digests` (n log k: cheap for one digest or thousands), then each match checked
    whole."""
    column = np.asarray(rng.digest)
    if not len(column):
        return []
    want = np.frombuffer(b"".join(digests), np.uint8).reshape(-1, 32)
    wanted = np.sort(np.ascontiguousarray(want[:, :8]).view(np.uint64).ravel())
    heads = np.ascontiguousarray(column[:, :8]).view(np.uint64).ravel()
    at = np.searchsorted(wanted, heads)
    at[at == len(wanted)] = 0
    near = (wanted[at] == heads) & (np.asarray(rng.kind) == RefKind.OBJECT)
    found = {column[i].tobytes() for i in np.flatnonzero(near).tolist()}
    return [d for d in digests if d in found]


def fragment_refs(objects: Objects, location: str, index: tuple[int, int, str]) -> dict[str, int]:
    """Object keys a staged fragment refers to (itself included), with the bytes each must
    hold at least; empty if the fragment is gone."""
    offset, length, index_id = index
    try:
        data = objects.store.get(location, (offset, offset + length))
    except NotFoundError:
        return {}
    return _with_self(FragmentIndex.decode(index_id, data), location, offset + length)


def record_refs(objects: Objects, record: FragmentRecord) -> dict[str, int]:
    """Object keys the fragment of a staging record refers to. A fragment held in its
    record names its own location only if manifests may point into it (a commit then
    writes it out)."""
    if record.blob is None:
        return fragment_refs(objects, record.location, record.index)
    index = FragmentIndex.decode(record.index_id, record.blob[record.index_offset :])
    refs = manifest_refs(index.writes)
    if record.data_bytes:
        refs[record.location] = len(record.blob)
    return refs


def _with_self(index: FragmentIndex, location: str, size: int) -> dict[str, int]:
    refs = manifest_refs(index.writes)
    refs[location] = max(refs.get(location, 0), size)
    return refs


class Reach:
    """Accumulates the set of live object keys."""

    def __init__(self, objects: Objects, expired: set[str]) -> None:
        self.objects = objects
        self.expired = expired
        self.live: set[str] = set()

    def add_keys(self, keys: Iterable[str]) -> None:
        """Mark `keys` live."""
        self.live.update(keys)

    def add_commits(self, starts: Iterable[str], even_expired: Iterable[str] = ()) -> None:
        """Mark `starts` and their ancestry (all parents), stopping at expired commits.
        Commits in `even_expired` are marked though expired (a history operation keeps
        them while `expire` may undo its marker), unless their record is gone."""
        forced = set(even_expired)
        stack = [c for c in starts if c not in self.expired] + sorted(forced)
        while stack:
            cid = stack.pop()
            key = f"{prefix_of(CommitRecord)}/{cid}"
            if key in self.live:
                continue
            try:
                rec = self.objects.read_commit(cid)
            except ExpiredHistoryError:  # expired since this walk began: a walk stops there
                self.expired.add(cid)  # (what is still needed is reached from today's refs)
                continue
            except NotFoundError:
                if cid in forced:
                    continue  # expire deleted it: the operation keeping it refuses
                raise
            self.live.add(key)
            self.live.add(f"{prefix_of(ChangeSet)}/{rec.changes}")
            self.add_snapshot(rec.snapshot)
            stack.extend(p for p in rec.parents if p not in self.expired)

    def add_snapshot(self, sid: str) -> None:
        """Mark a snapshot live with its manifest ranges and every object they reference.

        Ranges already marked (shared with another snapshot) are not read again."""
        key = f"{prefix_of(SnapshotRoot)}/{sid}"
        if key in self.live:
            return
        root = self.objects.read(SnapshotRoot, sid)
        self.live.add(key)
        todo = [m for m in root.ranges.ids if f"{prefix_of(ManifestRange)}/{m}" not in self.live]
        for rng_id, rng in zip(
            todo, self.objects.map(lambda m: self.objects.read(ManifestRange, m), todo), strict=True
        ):
            self.live.add(f"{prefix_of(ManifestRange)}/{rng_id}")
            self.live.update(manifest_refs(rng))


def expired_commits(objects: Objects) -> set[str]:
    """Ids of the commits whose history was expired."""
    return {k[len(EXPIRED_PREFIX) :] for k in objects.store.list(EXPIRED_PREFIX)}
