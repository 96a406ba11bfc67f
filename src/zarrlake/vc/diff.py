"""Differences between two snapshots, or between a snapshot and a session's staged writes."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from zarrlake.errors import ExpiredHistoryError
from zarrlake.format.changes import WRITE, ChangeSet, Move, NodeChangeKind
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import RangeIndex, SnapshotRoot, is_meta_key, node_path
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.vc.chunk_keys import KeyNamer, load_doc
from zarrlake.vc.moves import backward, forward, forward_keys, may_move, relating
from zarrlake.vc.objects import Objects


@dataclass
class Diff:
    """What changed from one state to another.

    Paths have no leading slash; chunk sets hold coordinate tuples (or, for keys that are not
    chunks of an array, the key itself).

    For an array whose shards zarrlake stores as inner chunks, the coordinates are those of
    inner chunks (a shard stored whole, written before shards were split, counts as all of
    its inner chunks), and `chunks_per_shard` gives the grouping: inner chunk `c` lies in
    shard `c // chunks_per_shard`."""

    nodes_added: set[str] = field(default_factory=set)
    nodes_deleted: set[str] = field(default_factory=set)
    metadata_changed: set[str] = field(default_factory=set)
    chunks_written: dict[str, set] = field(default_factory=dict)
    chunks_deleted: dict[str, set] = field(default_factory=dict)
    metadata: dict[str, dict] = field(default_factory=dict)
    """Per node in `metadata_changed`, what changed in its zarr.json (`metadata_changes`)."""
    chunks_per_shard: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Per changed array stored as inner chunks, its inner chunks per shard and dimension."""
    nodes_moved: dict[str, str] = field(default_factory=dict)
    """Nodes moved (renamed), old path -> new path. A moved node is compared with what it
    was at its old path: only what changed besides the move is listed, at its new path."""

    def shards_of(self, path: str, coords: Iterable) -> dict[tuple[int, ...], list]:
        """Inner-chunk coordinates of array `path`, grouped by the shard holding them.

        Each coordinate is its own group for an array not stored as inner chunks.
        """
        per = self.chunks_per_shard.get(path)
        out: dict[tuple[int, ...], list] = defaultdict(list)
        for c in sorted(c for c in coords if isinstance(c, tuple)):
            shard = c if per is None else tuple(k // n for k, n in zip(c, per, strict=True))
            out[shard].append(c)
        return dict(out)

    def is_empty(self) -> bool:
        """Whether nothing changed: no node added, deleted or changed, no chunk written or deleted.

        Returns
        -------
        bool
            True when the two states hold the same data and metadata.
        """
        return not (
            self.nodes_added
            or self.nodes_deleted
            or self.metadata_changed
            or self.chunks_written
            or self.chunks_deleted
            or self.nodes_moved
        )

    def summary(self) -> list[tuple[str, str, int, int]]:
        """A row per changed node, by path.

        A row is (path, what happened to the node, chunks written, chunks deleted); the node's
        change is "added", "deleted", "moved from OLD PATH", "metadata changed" or "data".
        """
        moved_from = {new: old for old, new in self.nodes_moved.items()}
        paths = (
            self.nodes_added
            | self.nodes_deleted
            | self.metadata_changed
            | self.chunks_written.keys()
            | self.chunks_deleted.keys()
            | moved_from.keys()
        )
        rows = []
        for p in sorted(paths):
            if p in moved_from:
                change = f"moved from {moved_from[p] or '/'}"
            elif p in self.nodes_added:
                change = "added"
            elif p in self.nodes_deleted:
                change = "deleted"
            elif p in self.metadata_changed:
                change = "metadata changed"
            else:
                change = "data"
            written = len(self.chunks_written.get(p, ()))
            rows.append((p, change, written, len(self.chunks_deleted.get(p, ()))))
        return rows

    def to_json(self) -> dict:
        """The differences as JSON-ready data: sorted lists, chunk coordinates as lists.

        Returns
        -------
        dict
            Keys `nodes_added`, `nodes_deleted`, `metadata_changed`, `chunks_written`,
            `chunks_deleted` and `metadata`: what `zarrlake diff --json` prints; with
            moves, `nodes_moved` (old path -> new path).
        """

        def chunks(d: dict[str, set]) -> dict[str, list]:
            return {
                p: sorted(list(c) if isinstance(c, tuple) else [c] for c in s)
                for p, s in sorted(d.items())
            }

        out = {
            "nodes_added": sorted(self.nodes_added),
            "nodes_deleted": sorted(self.nodes_deleted),
            "metadata_changed": sorted(self.metadata_changed),
            "chunks_written": chunks(self.chunks_written),
            "chunks_deleted": chunks(self.chunks_deleted),
            "metadata": {p: self.metadata[p] for p in sorted(self.metadata)},
        }
        if self.chunks_per_shard:  # only with sharded arrays: older readers see no change
            out["chunks_per_shard"] = {p: list(n) for p, n in sorted(self.chunks_per_shard.items())}
        if self.nodes_moved:  # only with moves, likewise
            out["nodes_moved"] = dict(sorted(self.nodes_moved.items()))
        return out

    def metadata_lines(self, path: str) -> list[str]:
        """What changed in the metadata of node `path`, one readable line per change."""
        return describe_metadata(self.metadata.get(path, {}))


FIELD_NAMES = {"data_type": "dtype", "chunk_grid": "chunks"}


def metadata_changes(old: bytes, new: bytes) -> dict:
    """What differs between two zarr.json documents: each changed field as [from, to]
    (the chunk grid as its chunk shape), attributes as added / removed / changed."""
    a, b = load_doc(old), load_doc(new)
    out: dict = {}
    for name in sorted((a.keys() | b.keys()) - {"attributes"}):
        before, after = a.get(name), b.get(name)
        if name == "chunk_grid":
            before, after = grid_shape(before), grid_shape(after)
        if before != after:
            out[name] = [before, after]
    attrs_a, attrs_b = a.get("attributes") or {}, b.get("attributes") or {}
    attrs = {
        "added": {k: attrs_b[k] for k in sorted(attrs_b.keys() - attrs_a.keys())},
        "removed": sorted(attrs_a.keys() - attrs_b.keys()),
        "changed": {
            k: [attrs_a[k], attrs_b[k]]
            for k in sorted(attrs_a.keys() & attrs_b.keys())
            if attrs_a[k] != attrs_b[k]
        },
    }
    if any(attrs.values()):
        out["attributes"] = attrs
    return out


def grid_shape(grid: object) -> object:
    """A regular chunk grid as its chunk shape; any other grid as it is."""
    if isinstance(grid, dict) and grid.get("name") == "regular":
        return (grid.get("configuration") or {}).get("chunk_shape")
    return grid


def describe_metadata(changes: dict) -> list[str]:
    """`metadata_changes` as lines: "shape [10] -> [20]", "attribute 'units' added: 'K'"."""
    lines = []
    for name, value in changes.items():
        if name != "attributes":
            before, after = (_short(v) for v in value)
            lines.append(f"{FIELD_NAMES.get(name, name)} {before} -> {after}")
    attrs = changes.get("attributes") or {}
    lines += [f"attribute {k!r} added: {_short(v)}" for k, v in attrs.get("added", {}).items()]
    lines += [f"attribute {k!r} removed" for k in attrs.get("removed", [])]
    lines += [
        f"attribute {k!r} changed: {_short(a)} -> {_short(b)}"
        for k, (a, b) in attrs.get("changed", {}).items()
    ]
    return lines


def _short(value: object, limit: int = 80) -> str:
    text = json.dumps(value, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_diff(
    old_meta: dict[str, bytes],
    new_meta: dict[str, bytes],
    written: Iterable[str],
    deleted: Iterable[str],
) -> Diff:
    """A Diff from metadata documents before and after, and the data keys written/deleted."""
    d = Diff()
    for key in old_meta.keys() | new_meta.keys():
        a, b = old_meta.get(key), new_meta.get(key)
        if a == b:
            continue
        path = node_path(key)
        if a is None:
            d.nodes_added.add(path)
        elif b is None:
            d.nodes_deleted.add(path)
        else:
            d.metadata_changed.add(path)
            d.metadata[path] = metadata_changes(a, b)
    namer = KeyNamer(old_meta, new_meta)
    for key, write in _ops(written, deleted):
        _add(d, namer, key, write)
    _settle_shards(d, namer)
    return d


def _ops(written: Iterable[str], deleted: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """(key, written?) of each data key written or deleted."""
    for k in written:
        yield k, True
    for k in deleted:
        yield k, False


def _add(d: Diff, namer: KeyNamer, key: str, write: bool) -> None:
    """Record one data key written or deleted: by node and chunk coordinates (a shard
    stored whole of an array stored as inner chunks: as all its inner chunks)."""
    node, coords = namer.name(key)
    target = (d.chunks_written if write else d.chunks_deleted).setdefault(node, set())
    inner = namer.inner_of_shard(node, key) if coords is not None else None
    if inner is not None:
        target.update(inner)
    else:
        target.add(coords if coords is not None else key)


def _settle_shards(d: Diff, namer: KeyNamer) -> None:
    """Note the grouping of arrays stored as inner chunks; an inner chunk both deleted (as
    part of a shard stored whole) and written (as its own entry) was rewritten."""
    for node in d.chunks_written.keys() | d.chunks_deleted.keys():
        layout = namer.layout(node)
        if layout is None:
            continue
        d.chunks_per_shard[node] = layout.chunks_per_shard
        deleted = d.chunks_deleted.get(node)
        if deleted:
            deleted -= d.chunks_written.get(node, set())
            if not deleted:
                del d.chunks_deleted[node]


def diff_snapshots(
    objects: Objects, a: SnapshotRoot, b: SnapshotRoot, moves: Sequence[Move] = ()
) -> Diff:
    """Compare two snapshots, reading only the manifest ranges they do not share. `moves`
    (made from `a` to `b`, in order) rename `a`'s side first, so a moved node is compared
    with what it was and reported as moved."""
    shared = set(a.ranges.ids) & set(b.ranges.ids)
    if moves:  # ranges that may hold a moved key are read on both sides
        prefixes = [(p + "/").encode() for m in moves for p in m]
        shared -= _touching(a.ranges, prefixes) | _touching(b.ranges, prefixes)

    def entries(root: SnapshotRoot, renamed: Sequence[Move] = ()) -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for oid in root.ranges.ids:
            if oid in shared:
                continue
            r = objects.read(ManifestRange, oid)
            keys = forward_keys(r.keys, renamed) if renamed else r.keys
            out.update(zip(keys.tolist(), (d.tobytes() for d in r.digest), strict=True))
        return out

    ea, eb = entries(a, moves), entries(b)
    old_meta = {forward(k, moves): doc for k, doc in a.meta.items()} if moves else a.meta
    written = [k.decode() for k, dig in eb.items() if ea.get(k) != dig]
    deleted = [k.decode() for k in ea.keys() - eb.keys()]
    d = build_diff(old_meta, b.meta, written, deleted)
    d.nodes_moved = moved_nodes(moves, a.meta, b.meta)
    return d


def moved_nodes(moves: Sequence[Move], old_meta: dict, new_meta: dict) -> dict[str, str]:
    """The nodes `moves` carried from one state to the other, old path -> new path: each
    move's node named as it was before the moves and as it is after them, where the first
    state holds it under the old name and the second under the new one."""
    out = {}
    for i, (src, dst) in enumerate(moves):
        old, new = backward(src, moves[:i]), forward(dst, moves[i + 1 :])
        if old != new and f"{old}/zarr.json" in old_meta and f"{new}/zarr.json" in new_meta:
            out[old] = new
    return out


def _touching(idx: RangeIndex, prefixes: list[bytes]) -> set[str]:
    """Ids of the ranges of `idx` that may hold a key starting with one of `prefixes`."""
    out: set[str] = set()
    for p in prefixes:
        stop = prefix_upper_bound(p)
        lo = idx.locate(p)
        hi = len(idx) if stop is None else int(np.searchsorted(idx.first_keys, stop))
        out.update(idx.ids[max(lo, 0) : max(hi, lo + 1)])
    return out


def diff_commit(objects: Objects, commit_id: str) -> Diff:
    """What a commit changed against its first parent: compared with the parent's snapshot
    (through the moves its change set records), or read from the commit's change set when
    `expire` dropped the parent."""
    rec = objects.read_commit(commit_id)
    if not rec.parents:
        return Diff()
    try:
        parent = objects.parent(commit_id, rec.parents[0])
    except ExpiredHistoryError:
        return diff_change_set(objects, rec)
    root = objects.read(SnapshotRoot, rec.snapshot)
    old = objects.read(SnapshotRoot, parent.snapshot)
    moves = objects.read(ChangeSet, rec.changes).moves if may_move(old.meta, root.meta) else ()
    return diff_snapshots(objects, old, root, moves)


def diff_commits(objects: Objects, a: str, b: str) -> Diff:
    """What changed from commit `a` to commit `b`: their snapshots compared, through the
    moves made between them when one descends from the other along first parents."""
    old = objects.read(SnapshotRoot, objects.snapshot_of(a))
    new = objects.read(SnapshotRoot, objects.snapshot_of(b))
    moves = relating(objects, a, b) if may_move(old.meta, new.meta) else None
    return diff_snapshots(objects, old, new, moves or ())


def diff_change_set(objects: Objects, rec: CommitRecord) -> Diff:
    """What a commit changed against its first parent, from its change set alone (needs no
    parent: for a commit whose history was expired). No metadata details: the documents
    before are not known."""
    cs = objects.read(ChangeSet, rec.changes)
    d = Diff()
    for path, change in cs.nodes.items():
        kind = {
            NodeChangeKind.CREATED: d.nodes_added,
            NodeChangeKind.DELETED: d.nodes_deleted,
        }.get(change.kind)
        (kind if kind is not None else d.metadata_changed).add(path)
    namer = KeyNamer(objects.read(SnapshotRoot, rec.snapshot).meta)
    for key, op in zip(cs.keys.tolist(), cs.ops.tolist(), strict=True):
        k = key.decode()
        if is_meta_key(k):
            continue
        _add(d, namer, k, op == WRITE)
    _settle_shards(d, namer)
    return d


def diff_staged(
    base_meta: dict[str, bytes],
    base_get: Callable[[str], ChunkRef | None],
    staged: Iterable[tuple[str, ChunkRef | None]],
    moves: Sequence[Move] = (),
) -> Diff:
    """The Diff a session's staged writes make against its base snapshot; `moves`, the
    nodes it moved, in order (a moved key is compared with what it was before the move)."""
    new_meta = dict(base_meta)
    data: dict[str, ChunkRef | None] = {}
    for key, ref in staged:
        if not is_meta_key(key):
            data[key] = ref
        elif ref is None:
            new_meta.pop(key, None)
        else:
            new_meta[key] = ref.data or b""
    written, deleted = [], []
    for key, ref in data.items():
        if ref is not None:
            old = base_get(backward(key, moves))
            if old is None or old.digest != ref.digest:
                written.append(key)
            continue
        now = forward(key, moves)  # where a move took it
        if now != key and data.get(now) is not None:
            continue  # compared at its new key
        if base_get(key) is not None:
            deleted.append(now)
    old_meta = {forward(k, moves): doc for k, doc in base_meta.items()} if moves else base_meta
    d = build_diff(old_meta, new_meta, written, deleted)
    d.nodes_moved = moved_nodes(moves, base_meta, new_meta)
    return d
