"""Blame: which commit last wrote one chunk, following merges into the side it came from
and moves back to the path the chunk had before."""

from __future__ import annotations

import numpy as np

from zarrlake.errors import ExpiredHistoryError, InvalidInputError, NotFoundError
from zarrlake.format.changes import ChangeSet
from zarrlake.format.shard import inner_key, layout_of
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.chunk_keys import is_array_doc, load_doc
from zarrlake.vc.moves import backward
from zarrlake.vc.objects import Objects
from zarrlake.vc.snapshot_view import SnapshotView


def chunk_key(array_path: str, doc: bytes, coords: tuple[int, ...]) -> str:
    """The store key of chunk `coords` of the array whose zarr.json is `doc`."""
    meta = load_doc(doc)
    enc = meta.get("chunk_key_encoding") or {}
    name = enc.get("name", "default") if isinstance(enc, dict) else "default"
    sep = (enc.get("configuration") or {}).get("separator") if isinstance(enc, dict) else None
    shape = meta.get("shape") or []
    if len(coords) != len(shape):
        raise InvalidInputError(
            f"array {array_path!r} has {len(shape)} dimensions; got chunk coordinates {coords}"
            "; give one coordinate per dimension"
        )
    if name == "default":
        suffix = (sep or "/").join(["c", *map(str, coords)])
    else:
        suffix = (sep or ".").join(map(str, coords)) or "0"
    return f"{array_path}/{suffix}" if array_path else suffix


class Blame:
    """Finds the commit that last wrote a chunk, walking history from a head."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects

    def _digest(self, commit_id: str, key: str) -> bytes | None:
        rec = self.objects.read_commit(commit_id)
        root = self.objects.read(SnapshotRoot, rec.snapshot)
        ref = SnapshotView(self.objects, root, rec.snapshot).get(key)
        return ref.digest if ref is not None else None

    def _changes(self, commit_id: str) -> ChangeSet:
        return self.objects.read(ChangeSet, self.objects.read_commit(commit_id).changes)

    def blame(self, head: str, array_path: str, coords: tuple[int, ...]) -> str:
        """The id of the commit that last wrote chunk `coords` of `array_path` as seen at
        `head`. At a merge commit that brought the chunk in, follow the parent that already
        had the same bytes; at a commit that moved its array, follow it to its old path.
        ExpiredHistoryError if the walk reaches history `expire` dropped before it finds
        the commit."""
        path = array_path.strip("/")
        root = self.objects.read(SnapshotRoot, self.objects.read_commit(head).snapshot)
        doc = root.meta.get(f"{path}/zarr.json" if path else "zarr.json")
        if not is_array_doc(doc):
            raise NotFoundError(
                f"no array {array_path!r} at {head[:12]}; run `zarrlake ls REF` to see the arrays"
            )
        assert doc is not None
        coords = tuple(int(c) for c in coords)
        key, target = chunk_key(path, doc, coords), None
        for candidate in [*inner_candidates(path, doc, coords), key]:
            target = self._digest(head, candidate)
            if target is not None:
                key = candidate
                break
        if target is None:
            check_in_grid(array_path, doc, coords)
            raise NotFoundError(
                f"chunk {coords} of {array_path!r} was never written; blame a chunk that holds data"
            )
        cid = head
        while True:
            try:
                after = self._next(cid, key, target)
            except ExpiredHistoryError as e:
                raise ExpiredHistoryError(
                    f"chunk {coords} of {array_path!r} was last written before {cid[:12]}; {e}",
                    e.commit,
                    e.expired_at,
                ) from None
            if after is None:
                return cid
            cid, key = after

    def _next(self, cid: str, key: str, target: bytes) -> tuple[str, str] | None:
        """The commit to look at after `cid` and the chunk's key there, or None if `cid`
        wrote the chunk."""
        rec = self.objects.read_commit(cid)
        if not rec.parents:
            return None
        cs = self._changes(cid)
        after = rec.parents[0]
        if _holds(cs.keys, key.encode()):
            same = [p for p in rec.parents[1:] if self._digest(p, key) == target]
            old = backward(key, cs.moves)
            if same:
                after = same[0]
            elif old != key and self._digest(after, old) == target:
                key = old  # moved here by this commit, with the bytes it had
            else:
                return None
        self.objects.parent(cid, after)
        return after, key


def _holds(keys: np.ndarray, key: bytes) -> bool:
    """Whether sorted `keys` holds `key`."""
    i = int(np.searchsorted(keys, key))
    return i < len(keys) and keys[i] == key


def inner_candidates(path: str, doc: bytes, coords: tuple[int, ...]) -> list[str]:
    """The entry key of inner chunk `coords` of a sharded array whose shards are stored as
    inner chunks (format/shard.py); nothing for other arrays. Coordinates of a sharded
    array are those of its inner chunks, as diffs name them; a shard stored whole is still
    found by its own coordinates."""
    layout = layout_of(doc)
    if layout is None or len(coords) != len(layout.chunks_per_shard):
        return []
    shard = tuple(c // n for c, n in zip(coords, layout.chunks_per_shard, strict=True))
    local = ".".join(str(c % n) for c, n in zip(coords, layout.chunks_per_shard, strict=True))
    return [inner_key(chunk_key(path, doc, shard), local)]


def check_in_grid(array_path: str, doc: bytes, coords: tuple[int, ...]) -> None:
    """InvalidInputError if `coords` lies outside the array's (regular) chunk grid."""
    meta = load_doc(doc)
    shape = meta.get("shape") or []
    chunks = ((meta.get("chunk_grid") or {}).get("configuration") or {}).get("chunk_shape")
    if not isinstance(chunks, list) or len(chunks) != len(shape):
        return
    grid = tuple(-(-int(n) // max(int(c), 1)) for n, c in zip(shape, chunks, strict=True))
    if any(not 0 <= c < g for c, g in zip(coords, grid, strict=True)):
        last = tuple(g - 1 for g in grid)
        raise InvalidInputError(
            f"chunk {coords} is outside the chunk grid of {array_path!r}: "
            f"{' x '.join(map(str, grid))} chunks, from {(0,) * len(grid)} to {last}"
            "; give coordinates inside the grid"
        )
