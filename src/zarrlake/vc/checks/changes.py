"""The change a check runs on: which chunks of which arrays a commit wrote or deleted
against a base, read from the commit's change set when the base is its parent (the usual
case: no manifest is read) and by comparing the two snapshots' differing manifest ranges
otherwise. Either way the cost grows with the change, not the arrays."""

from __future__ import annotations

from dataclasses import dataclass

from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.checks.context import Coords
from zarrlake.vc.chunk_keys import KeyNamer
from zarrlake.vc.diff import Diff, diff_change_set, diff_snapshots
from zarrlake.vc.objects import Objects


@dataclass(frozen=True)
class Change:
    """The chunks a commit changed against a base, per array, and both metadata sets."""

    commit: str
    base: str
    written: dict[str, list[Coords]]
    deleted: dict[str, list[Coords]]
    new_meta: dict[str, bytes]
    old_meta: dict[str, bytes]
    nodes: frozenset[str]
    """Paths of the nodes whose metadata document changed."""

    def arrays(self) -> list[str]:
        """Arrays with changed chunks or metadata, sorted."""
        return sorted(set(self.written) | set(self.deleted) | self.nodes)

    @property
    def size(self) -> int:
        """Chunks written or deleted in all."""
        return sum(map(len, self.written.values())) + sum(map(len, self.deleted.values()))


def _coords(groups: dict[str, set], namer: KeyNamer) -> dict[str, list[Coords]]:
    """Node -> sorted chunk coordinates. A key the diff could not name (the chunks of an
    array the commit deleted: its document is gone from the new snapshot) is named with
    the documents of both snapshots, so deleting an array counts its chunks."""
    found: dict[str, set[Coords]] = {}
    for node, items in groups.items():
        for c in items:
            if isinstance(c, tuple):
                found.setdefault(node, set()).add(c)
                continue
            owner, coords = namer.name(c)
            if coords is not None and f"{owner}/zarr.json" in namer.docs:
                found.setdefault(owner, set()).add(coords)
    return {node: sorted(coords) for node, coords in found.items() if coords}


def change_between(objects: Objects, commit: str, base: str) -> Change:
    """What `commit` changed against `base` (any commit; usually its first parent)."""
    rec = objects.read_commit(commit)
    new = objects.read(SnapshotRoot, rec.snapshot)
    old = objects.read(SnapshotRoot, objects.snapshot_of(base)) if base != commit else new
    if base == commit:
        diff = Diff()
    elif rec.parents and rec.parents[0] == base:
        diff = diff_change_set(objects, rec)
    else:
        diff = diff_snapshots(objects, old, new)
    nodes = frozenset(
        k[: -len("zarr.json")].rstrip("/")
        for k in set(old.meta) | set(new.meta)
        if old.meta.get(k) != new.meta.get(k)
    )
    namer = KeyNamer(old.meta, new.meta)
    return Change(
        commit,
        base,
        _coords(diff.chunks_written, namer),
        _coords(diff.chunks_deleted, namer),
        new.meta,
        old.meta,
        nodes,
    )
