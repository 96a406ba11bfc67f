"""Repository statistics at one commit: history length, arrays, chunks and their bytes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zarrlake.format.chunk_ref import RefKind
from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.objects import Objects


@dataclass(frozen=True)
class RepoStats:
    """Size of one commit's snapshot: nodes, stored and virtual chunks and bytes, history length."""

    commit_id: str
    commits: int  # in the first-parent history, the initial commit included
    groups: int
    arrays: int
    chunks: int  # stored in the repository (virtual ones not included)
    bytes: int  # of the chunks the snapshot references (stored once however often shared)
    virtual_chunks: int = 0  # byte ranges of source files outside the repository
    virtual_bytes: int = 0
    virtual_sources: int = 0  # distinct source files


def repo_stats(objects: Objects, commit_id: str) -> RepoStats:
    """Counts at `commit_id`; reads every manifest range of its snapshot once."""
    commits = sum(1 for _ in objects.history(commit_id))
    rec: CommitRecord = objects.read_commit(commit_id)
    root = objects.read(SnapshotRoot, rec.snapshot)
    arrays = sum(1 for doc in root.meta.values() if is_array_doc(doc))
    size = virtual = virtual_size = 0
    sources: set[str] = set()
    for oid in root.ranges.ids:
        rng = objects.read(ManifestRange, oid)
        is_virtual = np.asarray(rng.kind) == RefKind.VIRTUAL
        size += int(rng.length[~is_virtual].sum())
        if is_virtual.any():
            virtual += int(is_virtual.sum())
            virtual_size += int(rng.length[is_virtual].sum())
            sources.update(rng.locations[i] for i in np.unique(rng.loc[is_virtual]).tolist())
    return RepoStats(
        commit_id,
        commits,
        len(root.meta) - arrays,
        arrays,
        root.ranges.total() - virtual,
        size,
        virtual,
        virtual_size,
        len(sources),
    )


def virtual_keys(objects: Objects, commit_id: str, prefix: str) -> set[str]:
    """The keys starting with `prefix` whose chunk at `commit_id` is virtual (a chunk map
    draws them in their own colour)."""
    root = objects.read(SnapshotRoot, objects.snapshot_of(commit_id))
    p = prefix.encode()
    out: set[str] = set()
    for oid in root.ranges.ids:
        rng = objects.read(ManifestRange, oid)
        if not len(rng) or not (rng.kind == RefKind.VIRTUAL).any():
            continue
        hit = (rng.kind == RefKind.VIRTUAL) & np.char.startswith(rng.keys, p)
        out.update(k.decode() for k in rng.keys[hit].tolist())
    return out
