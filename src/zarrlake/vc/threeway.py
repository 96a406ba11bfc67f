"""Three-way merge of two snapshots against a common base, one chunk at a time.

A chunk changed on one side only is taken from that side; changed on both sides to the same
bytes is taken once; to different bytes is a conflict. Metadata follows the commit rules
(conflicts.find_conflicts): a node's document changed differently on both sides conflicts,
and a resize, re-chunk, re-type or delete on one side conflicts with chunk writes under it
on the other; except that two attribute-only changes merge key by key. A node moved on one
side is a delete and a create there, so the same rules catch a change under its old path
on the other side (reported as `renamed`); the moves the other side made that the result
shows are carried into the merge commit's change set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from zarrlake.errors import Conflict, ConflictKind
from zarrlake.format.changes import ChangeSet, Move, NodeChangeKind
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.manifest import ManifestRange, take_from
from zarrlake.format.snapshot import SnapshotRoot, node_path
from zarrlake.vc.chunk_keys import KeyNamer, load_doc
from zarrlake.vc.commit_protocol import Change, classify
from zarrlake.vc.conflicts import find_conflicts
from zarrlake.vc.moves import meta_nodes, valid_on
from zarrlake.vc.objects import Objects

_MISSING = object()


@dataclass
class MergeResult:
    """What to apply on top of `ours` to get the merged snapshot, and what conflicted.
    `chunk_keys` are the data keys changed differently on both sides; `moves`, the nodes
    `theirs` moved that the merge moves on `ours`."""

    changes: list[Change]
    conflicts: list[Conflict]
    chunk_keys: dict[str, ChunkRef | None]
    moves: tuple[Move, ...] = ()
    gains: ManifestRange = field(default_factory=ManifestRange.empty)
    """Chunks both sides hold the same bytes of, whose statistics only `theirs` knows
    (a backfill there): `ours`' entries with them, which change no chunk."""


@dataclass
class SideChanges:
    """The data keys one side changed against the base, sorted: `keys`, and per key its
    new digest (`deleted` marks removals) and where its new reference lives."""

    keys: np.ndarray
    digest: np.ndarray  # (n, 32) uint8; zeros where deleted
    deleted: np.ndarray  # bool
    ranges: list[ManifestRange]
    owner: np.ndarray  # index into ranges, -1 where deleted
    pos: np.ndarray  # position in that range

    def ref(self, i: int) -> ChunkRef | None:
        """The new reference of changed key `i`, or None when that side deleted it."""
        return None if self.deleted[i] else self.ranges[self.owner[i]].ref_at(int(self.pos[i]))


def _columns(objects: Objects, root: SnapshotRoot, skip: set[str]):
    """Keys, digests, range number and position of every entry outside the ranges in
    `skip`, in key order (ranges are disjoint and sorted)."""
    ranges = [objects.read(ManifestRange, oid) for oid in root.ranges.ids if oid not in skip]
    if not ranges:
        none = np.zeros(0, np.int64)
        return ranges, np.zeros(0, "S1"), np.zeros((0, 32), np.uint8), none, none
    keys = np.concatenate([r.keys for r in ranges])
    digest = np.concatenate([r.digest for r in ranges]).reshape(len(keys), -1)
    owner = np.concatenate([np.full(len(r), j) for j, r in enumerate(ranges)])
    pos = np.concatenate([np.arange(len(r)) for r in ranges])
    return ranges, keys, digest, owner, pos


def data_changes(objects: Objects, base: SnapshotRoot, side: SnapshotRoot) -> SideChanges:
    """Data keys `side` changed against `base`. Only manifest ranges the two do not share
    are read, and the comparison is columnar."""
    shared = set(base.ranges.ids) & set(side.ranges.ids)
    _, kb, db, _, _ = _columns(objects, base, shared)
    ranges, ks, ds, owner, pos = _columns(objects, side, shared)
    _, ib, i_s = np.intersect1d(kb, ks, assume_unique=True, return_indices=True)
    differs = np.zeros(len(ks), bool)
    differs[i_s] = (db[ib] != ds[i_s]).any(axis=1)
    present = np.zeros(len(ks), bool)
    present[i_s] = True
    written = differs | ~present
    gone = np.ones(len(kb), bool)
    gone[ib] = False
    n_gone = int(gone.sum())
    keys = np.concatenate([ks[written], kb[gone]]) if n_gone else ks[written]
    order = np.argsort(keys, kind="stable")
    return SideChanges(
        keys=keys[order],
        digest=np.concatenate([ds[written], np.zeros((n_gone, 32), np.uint8)])[order],
        deleted=np.concatenate([np.zeros(int(written.sum()), bool), np.ones(n_gone, bool)])[order],
        ranges=ranges,
        owner=np.concatenate([owner[written], np.full(n_gone, -1)])[order],
        pos=np.concatenate([pos[written], np.zeros(n_gone, np.int64)])[order],
    )


def merge_attributes(
    base: bytes | None, ours: bytes, theirs: bytes
) -> tuple[bytes | None, list[str]]:
    """Both sides changed only attributes: ours' document with attributes merged key by key,
    or None and the attribute names both sides set differently."""
    b = load_doc(base).get("attributes") or {}
    o_doc = load_doc(ours)
    o, t = o_doc.get("attributes") or {}, load_doc(theirs).get("attributes") or {}
    merged, clashes = {}, []
    for key in sorted(b.keys() | o.keys() | t.keys()):
        bv, ov, tv = (d.get(key, _MISSING) for d in (b, o, t))
        if ov == tv:
            value = ov
        elif ov == bv:
            value = tv
        elif tv == bv:
            value = ov
        else:
            clashes.append(key)
            continue
        if value is not _MISSING:
            merged[key] = value
    if clashes:
        return None, clashes
    o_doc["attributes"] = merged
    return json.dumps(o_doc, indent=2).encode(), []


def three_way(
    objects: Objects,
    base: SnapshotRoot,
    ours: SnapshotRoot,
    theirs: SnapshotRoot,
    moves: tuple[tuple[Move, ...], tuple[Move, ...]] = ((), ()),
) -> MergeResult:
    """The merge of `theirs` into `ours` against `base`; `moves`, the nodes each side moved
    since `base` (ours, theirs)."""
    od = data_changes(objects, base, ours)
    td = data_changes(objects, base, theirs)
    _, io, it = np.intersect1d(od.keys, td.keys, assume_unique=True, return_indices=True)
    same = (od.deleted[io] & td.deleted[it]) | (
        ~od.deleted[io] & ~td.deleted[it] & (od.digest[io] == td.digest[it]).all(axis=1)
    )
    mine = np.zeros(len(td.keys), bool)
    mine[it] = True
    changes: list[Change] = [
        (bytes(td.keys[i]).decode(), td.ref(i)) for i in np.flatnonzero(~mine).tolist()
    ]
    clash = it[~same]
    chunk_keys = {bytes(td.keys[i]).decode(): td.ref(i) for i in clash.tolist()}
    drop_o, drop_t = np.ones(len(od.keys), bool), np.ones(len(td.keys), bool)
    drop_o[io[same]] = False
    drop_t[it[same]] = False

    # metadata, node by node; `*_meta` hold the documents each side's change set sees
    our_meta: dict[str, bytes | None] = {}
    their_meta: dict[str, bytes | None] = {}
    attr_clashes: dict[str, list[str]] = {}
    for key in sorted(base.meta.keys() | ours.meta.keys() | theirs.meta.keys()):
        b, o, t = base.meta.get(key), ours.meta.get(key), theirs.meta.get(key)
        if t == b or o == t:
            if o != b and o != t:
                our_meta[key] = o
            continue
        if o == b:
            changes.append((key, objects.inline(t) if t is not None else None))
            their_meta[key] = t
            continue
        oc, tc = classify(b, o), classify(b, t)
        if oc is not None and tc is not None and oc.kind == tc.kind == NodeChangeKind.ATTRIBUTES:
            assert o is not None and t is not None
            doc, clashes = merge_attributes(b, o, t)
            if doc is not None:
                changes.append((key, objects.inline(doc)))
                continue
            attr_clashes[node_path(key)] = clashes
        our_meta[key] = o
        their_meta[key] = t

    def cs(keys: np.ndarray, docs: dict[str, bytes | None], moved: tuple[Move, ...]) -> ChangeSet:
        nodes = {}
        for key, doc in docs.items():
            change = classify(base.meta.get(key), doc)
            if change is not None:
                nodes[node_path(key)] = change
        return ChangeSet(keys, np.zeros(len(keys), np.uint8), nodes, moved)

    namer = KeyNamer(base.meta, ours.meta, theirs.meta)
    conflicts = find_conflicts(
        cs(od.keys[drop_o], our_meta, moves[0]), cs(td.keys[drop_t], their_meta, moves[1]), namer
    )
    for i, c in enumerate(conflicts):
        if c.kind == ConflictKind.METADATA and c.path in attr_clashes:
            names = ", ".join(attr_clashes[c.path])
            detail = f"both sides set attribute(s) {names} differently"
            conflicts[i] = Conflict(c.path, c.kind, c.chunks, detail)
    carried = valid_on(moves[1], meta_nodes(ours.meta))
    return MergeResult(changes, conflicts, chunk_keys, carried, stats_gains(objects, ours, theirs))


def stats_gains(objects: Objects, ours: SnapshotRoot, theirs: SnapshotRoot) -> ManifestRange:
    """The entries of `theirs` whose bytes `ours` holds under the same key without their
    statistics (only manifest ranges the two do not share are read)."""
    shared = set(ours.ranges.ids) & set(theirs.ranges.ids)
    o_ranges, ko, do, _, _ = _columns(objects, ours, shared)
    t_ranges, kt, dt, owner, pos = _columns(objects, theirs, shared)
    if not len(ko) or not len(kt) or not any(r.has_stats for r in t_ranges):
        return ManifestRange.empty()
    _, io, it = np.intersect1d(ko, kt, assume_unique=True, return_indices=True)
    o_known = _known(o_ranges)
    t_known = _known(t_ranges)
    gain = (do[io] == dt[it]).all(axis=1) & ~o_known[io] & t_known[it]
    if not gain.any():
        return ManifestRange.empty()
    starts = np.cumsum([0] + [len(r) for r in t_ranges])
    return take_from(t_ranges, starts[owner[it[gain]]] + pos[it[gain]])


def _known(ranges: list[ManifestRange]) -> np.ndarray:
    """Per entry of `ranges` laid end to end: whether it has statistics."""
    parts = [np.zeros(len(r), bool) if r.stats is None else r.stats["kind"] != 0 for r in ranges]
    return np.concatenate(parts) if parts else np.zeros(0, bool)
