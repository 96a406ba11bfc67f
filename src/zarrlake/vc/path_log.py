"""The history of one path: the commits along first parents that changed a node or
anything below it, following it back through moves (`log --follow`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zarrlake.format.changes import ChangeSet
from zarrlake.format.commit import CommitRecord
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.vc.moves import backward
from zarrlake.vc.objects import Objects


def touches(cs: ChangeSet, path: str) -> bool:
    """Whether change set `cs` changed node `path` or anything below it (its keys are
    sorted: two binary searches)."""
    if not path:
        return bool(len(cs.keys) or cs.nodes)
    if any(p == path or p.startswith(path + "/") for p in cs.nodes):
        return True
    prefix = (path + "/").encode()
    lo = int(np.searchsorted(cs.keys, prefix))
    stop = prefix_upper_bound(prefix)
    hi = len(cs.keys) if stop is None else int(np.searchsorted(cs.keys, stop))
    return hi > lo


def path_history(
    objects: Objects, head: str, path: str, follow: bool = True
) -> Iterator[tuple[str, CommitRecord, str]]:
    """(id, record, the path's name there) of each commit from `head` along first parents
    that changed node `path` or anything below it, newest first. With `follow`, a commit
    that moved the node (or a group holding it) renames the path for the commits before.
    Ends where `expire` dropped older history."""
    path = path.strip("/")
    for cid, rec in objects.history(head):
        cs = objects.read(ChangeSet, rec.changes)
        if touches(cs, path):
            yield cid, rec, path
        if follow and cs.moves:
            path = backward(path, cs.moves)
