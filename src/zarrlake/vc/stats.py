"""Repository statistics at one commit: history length, arrays, chunks and their bytes."""

from __future__ import annotations

from dataclasses import dataclass

from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.objects import Objects


@dataclass(frozen=True)
class RepoStats:
    commit_id: str
    commits: int  # in the first-parent history, the initial commit included
    groups: int
    arrays: int
    chunks: int
    bytes: int  # of the chunks the snapshot references (stored once however often shared)


def repo_stats(objects: Objects, commit_id: str) -> RepoStats:
    """Counts at `commit_id`; reads every manifest range of its snapshot once."""
    commits = sum(1 for _ in objects.history(commit_id))
    rec: CommitRecord = objects.commit(commit_id)
    root = objects.read(SnapshotRoot, rec.snapshot)
    arrays = sum(1 for doc in root.meta.values() if is_array_doc(doc))
    size = 0
    for oid in root.ranges.ids:
        size += int(objects.read(ManifestRange, oid).length.sum())
    return RepoStats(commit_id, commits, len(root.meta) - arrays, arrays, root.ranges.total(), size)
