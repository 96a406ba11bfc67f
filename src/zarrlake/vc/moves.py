"""Moved nodes: paths and keys renamed through a sequence of moves, the moves a stretch of
first-parent history made, and which of them a state of the tree bears out.

A move renames a node and everything below it. Change sets record a commit's moves in the
order they were made (format/changes.py); following a node back through history applies
them backwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from zarrlake.format.changes import ChangeSet, Move
from zarrlake.format.snapshot import node_path
from zarrlake.vc.objects import Objects

__all__ = [
    "Move",
    "backward",
    "forward",
    "forward_keys",
    "may_move",
    "meta_nodes",
    "rekey",
    "relating",
    "valid_on",
]


def _under(path: str, node: str) -> bool:
    """Whether `path` is node `node` or lies below it."""
    return path == node or path.startswith(node + "/")


def forward(path: str, moves: Iterable[Move]) -> str:
    """`path` (a node path or a key) as the moves rename it, applied in order."""
    for src, dst in moves:
        if _under(path, src):
            path = dst + path[len(src) :]
    return path


def backward(path: str, moves: Sequence[Move]) -> str:
    """`path` as it was named before the moves (their inverses, newest first)."""
    for src, dst in reversed(moves):
        if _under(path, dst):
            path = src + path[len(dst) :]
    return path


def rekey(keys: np.ndarray, old: bytes, new: bytes) -> np.ndarray:
    """Byte-string keys that all start with `old`, with `new` in its place (columnar: no
    Python object per key). Keys sharing a prefix keep their order."""
    n = len(keys)
    width = keys.dtype.itemsize
    body = np.ascontiguousarray(keys).view(np.uint8).reshape(n, width)[:, len(old) :]
    out = np.empty((n, len(new) + body.shape[1]), np.uint8)
    out[:, : len(new)] = np.frombuffer(new, np.uint8)
    out[:, len(new) :] = body
    return out.view(f"S{out.shape[1]}").reshape(n)


def forward_keys(keys: np.ndarray, moves: Iterable[Move]) -> np.ndarray:
    """A column of byte-string keys renamed by the moves, applied in order (columnar)."""
    for src, dst in moves:
        old = (src + "/").encode()
        hit = np.char.startswith(keys, old) if len(keys) else np.zeros(0, bool)
        if hit.any():
            moved = rekey(keys[hit], old, (dst + "/").encode())
            keys = keys.astype(f"S{max(keys.dtype.itemsize, moved.dtype.itemsize)}")
            keys[hit] = moved
    return keys


def meta_nodes(meta: Iterable[str]) -> set[str]:
    """The node paths of metadata keys."""
    return {node_path(k) for k in meta}


def valid_on(moves: Iterable[Move], nodes: set[str]) -> tuple[Move, ...]:
    """The moves that apply, in turn, to a tree holding `nodes` (node paths): each moves a
    node that is there to a path that is free. Used to keep, of the moves one side of a
    merge made, those its result shows against the other side (the other side may have
    made the same move already)."""
    nodes = set(nodes)
    kept = []
    for src, dst in moves:
        if src not in nodes or dst in nodes:
            continue
        kept.append((src, dst))
        nodes = {forward(p, [(src, dst)]) for p in nodes}
    return tuple(kept)


def relating(objects: Objects, a: str, b: str) -> tuple[Move, ...] | None:
    """The moves that lead from commit `a` to commit `b`: those the commits after `a` up to
    `b` made, in order, when `b` descends from `a` along first parents (a merge commit
    records the moves it brought in); undone in reverse order when `a` descends from `b`;
    None when neither does. The two first-parent histories are walked in turn, so the walk
    stops where they meet (reading as far back as the nearer of the two from their fork)."""
    if a == b:
        return ()
    walks = {a: objects.history(a), b: objects.history(b)}
    passed: dict[str, list[str]] = {a: [], b: []}  # change sets of the commits walked
    seen: dict[str, set[str]] = {a: set(), b: set()}
    active = [a, b]
    while active:
        for start in list(active):
            other = b if start == a else a
            step = next(walks[start], None)
            if step is None:  # the root, or history `expire` dropped
                active.remove(start)
                continue
            cid, rec = step
            if cid == other:  # `other` is on `start`'s first-parent history
                sets = objects.map(lambda oid: objects.read(ChangeSet, oid), passed[start][::-1])
                moves = tuple(m for cs in sets for m in cs.moves)
                return moves if start == b else tuple((d, s) for s, d in reversed(moves))
            if cid in seen[other]:  # the histories met below both: neither holds the other
                return None
            seen[start].add(cid)
            passed[start].append(rec.changes)
    return None


def may_move(old_meta: Iterable[str], new_meta: Iterable[str]) -> bool:
    """Whether going from one set of metadata keys to another may involve a move: a move
    takes a node away and makes another, so both sets must hold a node the other lacks
    (only then are moves worth looking up in history)."""
    old, new = set(old_meta), set(new_meta)
    return bool(old - new) and bool(new - old)
