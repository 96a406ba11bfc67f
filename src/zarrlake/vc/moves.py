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
    "between",
    "forward",
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


def between(objects: Objects, old: str, new: str) -> tuple[Move, ...] | None:
    """The moves the commits after `old` up to `new` made, in order, along `new`'s first
    parents (a merge commit records the moves it brought in); None if `old` is not on that
    path. Change sets are read in parallel once the path is known."""
    path = []
    for cid, rec in objects.history(new):
        if cid == old:
            break
        path.append(rec.changes)
    else:
        return None
    sets = objects.map(lambda oid: objects.read(ChangeSet, oid), path[::-1])
    return tuple(m for cs in sets for m in cs.moves)


def relating(objects: Objects, a: str, b: str) -> tuple[Move, ...] | None:
    """The moves that lead from commit `a` to commit `b`: those made between them when `b`
    descends from `a` along first parents, undone in reverse order when `a` descends from
    `b`; None when neither does."""
    moves = between(objects, a, b)
    if moves is not None:
        return moves
    back = between(objects, b, a)
    return None if back is None else tuple((dst, src) for src, dst in reversed(back))


def may_move(old_meta: Iterable[str], new_meta: Iterable[str]) -> bool:
    """Whether going from one set of metadata keys to another may involve a move: a move
    takes a node away and makes another, so both sets must hold a node the other lacks
    (only then are moves worth looking up in history)."""
    old, new = set(old_meta), set(new_meta)
    return bool(old - new) and bool(new - old)
