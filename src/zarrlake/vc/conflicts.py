"""Detecting conflicts between a session's changes and commits that landed after its base.

Both sides are change sets against a common ancestor; the rules are DESIGN.md's: the same
chunk changed on both sides; the same node's metadata changed on both sides; chunks
written into an array whose structure or existence changed on the other side; anything
under a node deleted on the other side; and, for serializable sessions, anything read that
the other side changed.

A move is a delete of its source and a write of its destination with the same references,
so the rules above catch what clashes with it: a change under the source on the other
side, or the destination made there too. Conflicts under a moved source are reported as
`renamed`, naming where it went.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from zarrlake.errors import Conflict, ConflictKind
from zarrlake.format.changes import ChangeSet, NodeChangeKind
from zarrlake.format.snapshot import is_meta_key
from zarrlake.vc.chunk_keys import KeyNamer

_KIND_NAMES = {
    NodeChangeKind.CREATED: ConflictKind.CREATED,
    NodeChangeKind.DELETED: ConflictKind.DELETED,
    NodeChangeKind.RESIZED: ConflictKind.RESIZED,
}


def merge_changes(sets: list[ChangeSet]) -> ChangeSet:
    """The union of several commits' change sets (later node changes win; moves in order)."""
    if len(sets) == 1:
        return sets[0]
    keys = np.concatenate([s.keys for s in sets]) if sets else np.zeros(0, "S1")
    ops = np.concatenate([s.ops for s in sets]) if sets else np.zeros(0, np.uint8)
    uniq, idx = np.unique(keys[::-1], return_index=True)
    nodes = {}
    for s in sets:
        for path, change in s.nodes.items():
            prev = nodes.get(path)
            # created-then-changed stays "created"; anything-then-deleted is "deleted"
            if (
                prev is not None
                and prev.kind == NodeChangeKind.CREATED
                and change.kind != NodeChangeKind.DELETED
            ):
                continue
            # a structural change (resize, redefinition) is not hidden by later attributes
            if (
                prev is not None
                and prev.kind != NodeChangeKind.ATTRIBUTES
                and change.kind == NodeChangeKind.ATTRIBUTES
            ):
                continue
            nodes[path] = change
    moves = tuple(m for s in sets for m in s.moves)
    return ChangeSet(uniq, ops[::-1][idx], nodes, moves)


def without(cs: ChangeSet, nodes: set[str]) -> ChangeSet:
    """`cs` less some node changes (those both sides made alike)."""
    kept = {p: c for p, c in cs.nodes.items() if p not in nodes}
    return ChangeSet(cs.keys, cs.ops, kept, cs.moves)


def _under(keys: np.ndarray, path: str) -> np.ndarray:
    """Mask of keys inside node `path` (not its own metadata key)."""
    if not len(keys):
        return np.zeros(0, bool)
    prefix = (path + "/").encode() if path else b""
    return np.char.startswith(keys, prefix) if prefix else np.ones(len(keys), bool)


def _data_keys(cs: ChangeSet) -> np.ndarray:
    if not len(cs.keys):
        return cs.keys
    meta = np.char.endswith(cs.keys, b"/zarr.json") | (cs.keys == b"zarr.json")
    return cs.keys[~meta]


def find_conflicts(
    ours: ChangeSet,
    theirs: ChangeSet,
    namer: KeyNamer,
    reads: tuple[list[str], list[str]] | None = None,
) -> list[Conflict]:
    """Every conflict between our changes and theirs, grouped by node."""
    found: list[Conflict] = []
    by_node: dict[tuple[str, ConflictKind], list[tuple[int, ...]]] = defaultdict(list)
    loose: dict[tuple[str, ConflictKind], list[str]] = defaultdict(list)

    def add_keys(kind: ConflictKind, keys: list[str], node: str | None = None) -> None:
        for k in keys:
            n = node if node is not None else namer.node_of(k)
            c = namer.coords(n, k)
            if c is None:
                loose[(n, kind)].append(k)
            else:
                by_node[(n, kind)].append(c)

    our_data, their_data = _data_keys(ours), _data_keys(theirs)

    # the same data key changed on both sides
    both = np.intersect1d(our_data, their_data)
    add_keys(ConflictKind.CHUNK, [bytes(k).decode() for k in both])

    # node metadata: changed on both sides, or structure changed under the other's chunks
    for a, b, a_data in ((theirs, ours, our_data), (ours, theirs, their_data)):
        for path, change in a.nodes.items():
            if change.kind == NodeChangeKind.ATTRIBUTES and path not in b.nodes:
                continue
            if path in b.nodes and a is theirs:
                other = b.nodes[path]
                kind = (
                    ConflictKind.CREATED
                    if change.kind == other.kind == NodeChangeKind.CREATED
                    else ConflictKind.METADATA
                )
                found.append(Conflict(path, kind, None, f"both sides changed {path or '/'}"))
            if change.kind == NodeChangeKind.ATTRIBUTES:
                continue
            if change.kind != NodeChangeKind.DELETED and not change.is_array:
                continue
            inside = a_data[_under(a_data, path)]
            if len(inside):
                kind = _KIND_NAMES.get(change.kind, ConflictKind.METADATA)
                add_keys(kind, [bytes(k).decode() for k in inside], node=None)
            if change.kind == NodeChangeKind.DELETED:
                for p in b.nodes:
                    if p != path and p.startswith(path + "/" if path else ""):
                        found.append(
                            Conflict(p, ConflictKind.DELETED, None, f"{path or '/'} was deleted")
                        )

    if reads is not None:
        read_keys, read_prefixes = reads
        changed = {bytes(k).decode() for k in theirs.keys}
        hit = [k for k in read_keys if k in changed]
        meta_hit = [k for k in hit if is_meta_key(k)]
        for k in meta_hit:
            found.append(
                Conflict(namer.node_of(k), ConflictKind.READ, None, "read metadata was changed")
            )
        add_keys(ConflictKind.READ, [k for k in hit if not is_meta_key(k)])
        for p in read_prefixes:
            if any(k.startswith(p) for k in changed):
                found.append(
                    Conflict(p.rstrip("/"), ConflictKind.READ, None, f"listing of {p!r} changed")
                )

    for (node, kind), coords in by_node.items():
        found.append(Conflict(node, kind, sorted(set(coords))))
    for (node, kind), keys in loose.items():
        found.append(Conflict(node, kind, None, "keys " + ", ".join(sorted(keys)[:10])))
    return _dedupe([_renamed(c, (*ours.moves, *theirs.moves)) for c in found])


_MOVABLE = {
    ConflictKind.CHUNK,
    ConflictKind.DELETED,
    ConflictKind.METADATA,
    ConflictKind.RESIZED,
}


def _renamed(c: Conflict, moves: tuple[tuple[str, str], ...]) -> Conflict:
    """`c` as a `renamed` conflict when it lies under a node one side moved away."""
    if c.kind not in _MOVABLE:
        return c
    for src, dst in moves:
        if c.path == src or c.path.startswith(src + "/"):
            detail = f"{src!r} was moved to {dst!r} on one side"
            return Conflict(c.path, ConflictKind.RENAMED, c.chunks, detail)
    return c


def _dedupe(conflicts: list[Conflict]) -> list[Conflict]:
    seen, out = set(), []
    for c in conflicts:
        ident = (c.path, c.kind, tuple(c.chunks or ()), c.detail)
        if ident not in seen:
            seen.add(ident)
            out.append(c)
    return sorted(out, key=lambda c: (c.path, c.kind))
