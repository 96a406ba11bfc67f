"""Shard-aware staging: a shard written through the store becomes the inner chunks that
changed, so workers of one session writing disjoint inner chunks of a shard stage disjoint
keys (format/shard.py says how a shard is stored and which layouts are split).

zarr writes part of a shard by reading it, changing some inner chunks and writing it back
whole. What changed is judged against what this handle read of the shard (Overlay
`take_seen`), not against what the session holds now: another worker may have staged its
own inner chunks in between, and those must not read as deleted. A shard written without
being read (zarr writing all of it) is judged against what the session holds.
"""

from __future__ import annotations

from zarrlake.format.shard import inner_key
from zarrlake.txn.overlay import Overlay
from zarrlake.vc.objects import Objects

Op = tuple[str, tuple[int, int] | None, bytes | None]
"""A key, the span of the written shard's bytes it takes and their digest (None, None:
deleted; digest None: not computed)."""

WHOLE_SHARE = 0.5
"""A shard write whose changed inner chunks hold at least this share of its bytes stores
the shard as one object (its inner chunks are ranges of it); less, each changed inner
chunk as its own."""


class ShardPlanner:
    """Turns writes and deletes of shard keys into writes and deletes of inner chunks."""

    def __init__(self, objects: Objects, overlay: Overlay) -> None:
        self.objects = objects
        self.overlay = overlay

    def write(self, key: str, data: bytes | memoryview) -> list[Op] | None:
        """The changes writing shard bytes `data` to `key` makes: each inner chunk that
        changed as its key and byte span in `data`, a deleted one (or a whole entry
        replaced) with None; None if `key` is not a shard of a layout zarrlake splits, or
        `data` is not a valid shard (then it is written whole)."""
        layout = self.overlay.layout_of(key)
        spans = None if layout is None else layout.split(data)
        if spans is None:
            return None
        if self.overlay.whole(key) is not None:
            # A shard stored whole (before shards were split): every inner chunk is
            # staged, and the whole entry deleted.
            self.overlay.take_seen(key)
            gone = self.overlay.inner(key).keys() - spans.keys()
            whole: list[Op] = [(key, None, None)]
            return (
                whole
                + [(inner_key(key, n), span, None) for n, span in sorted(spans.items())]
                + [(inner_key(key, n), None, None) for n in sorted(gone)]
            )
        base = self.overlay.take_seen(key)
        if base is None:
            base = {n: r.digest for n, r in self.overlay.inner(key).items()}
        view = memoryview(data)
        ops: list[Op] = []
        for n, (s, e) in sorted(spans.items()):
            digest = self.objects.digest(view[s:e])
            if base.get(n) != digest:
                ops.append((inner_key(key, n), (s, e), digest))
        ops += [(inner_key(key, n), None, None) for n in sorted(base.keys() - spans.keys())]
        return ops

    def delete(self, key: str) -> list[str]:
        """The entries deleting shard `key` removes: its whole entry if stored, and the
        inner chunks this handle read of it (all it holds, if it did not read it)."""
        out = [key] if self.overlay.whole(key) is not None else []
        if not self.overlay.maybe_sharded(key):
            return out
        seen = self.overlay.take_seen(key) if self.overlay.layout_of(key) else None
        names = self.overlay.inner(key).keys() if seen is None else seen.keys()
        return out + [inner_key(key, n) for n in sorted(names)]

    def stale(self, key: str) -> list[tuple[str, None]]:
        """Deletes of the inner chunks a whole write of `key` replaces."""
        if not self.overlay.maybe_sharded(key):
            return []
        return [(inner_key(key, n), None) for n in sorted(self.overlay.inner(key))]
