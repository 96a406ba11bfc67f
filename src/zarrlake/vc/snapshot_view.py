"""Reading one snapshot: key lookups and listings over its root and manifest ranges."""

from __future__ import annotations

import builtins
from collections.abc import Iterator

import numpy as np

from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import SEP, shard_key_of
from zarrlake.format.snapshot import SnapshotRoot, is_meta_key
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.vc.objects import Objects

_AFTER_SEGMENT = (
    b"/\xff"  # sorts after every key below a '/'-terminated segment (UTF-8 has no 0xff)
)


class SnapshotView:
    """Reads keys of one snapshot: metadata from the root, chunks through its manifest ranges."""

    def __init__(self, objects: Objects, root: SnapshotRoot, snapshot_id: str) -> None:
        self.objects = objects
        self.root = root
        self.snapshot_id = snapshot_id

    def range(self, i: int) -> ManifestRange:
        """The manifest range at position `i` of the root's range index."""
        return self.objects.read(ManifestRange, self.root.ranges.ids[i])

    def get(self, key: str, stats: bool = True) -> ChunkRef | None:
        """The reference stored for `key` in this snapshot, or None; its statistics are
        decoded only if `stats` (a read of the bytes leaves them: they cost more than the
        rest of the reference)."""
        if is_meta_key(key):
            doc = self.root.meta.get(key)
            return self.objects.inline(doc) if doc is not None else None
        kb = key.encode()
        i = self.root.ranges.locate(kb)
        return self.range(i).get(kb, stats) if i >= 0 else None

    def inner(self, shard_key: str) -> dict[str, ChunkRef]:
        """name -> reference of the inner-chunk entries of the shard `shard_key`."""
        p = (shard_key + SEP).encode()
        stop = prefix_upper_bound(p)
        out: dict[str, ChunkRef] = {}
        for i in self._ranges_between(p, stop):
            r = self.range(i)
            part = r.key_slice(p, stop)
            names = (k[len(p) :].decode() for k in r.keys[part].tolist())
            out.update(zip(names, r.refs(part), strict=True))
        return out

    def entries_under(self, prefix: bytes, stats: bool = True) -> list[ManifestRange]:
        """The entries whose keys start with `prefix`, one piece per manifest range, in key
        order (columnar: a move carries them over without a Python object per entry);
        without their statistics unless `stats` (a read of the bytes never uses them, and
        picking entries with them decodes a range's statistics)."""
        stop = prefix_upper_bound(prefix)
        pieces = []
        for i in self._ranges_between(prefix, stop):
            r = self.range(i) if stats else self.range(i).without_stats()
            part = r.key_slice(prefix, stop)
            if part.stop > part.start:
                pieces.append(r.take(part))
        return pieces

    def _ranges_between(self, start: bytes, stop: bytes | None) -> builtins.range:
        idx = self.root.ranges
        if not len(idx):
            return range(0)
        lo = idx.locate(start)
        hi = len(idx) if stop is None else int(np.searchsorted(idx.first_keys, stop, side="left"))
        return range(lo, max(hi, lo + 1))

    def keys(self, prefix: str = "") -> Iterator[str]:
        """Every key starting with `prefix`, metadata keys first, then in byte order (a
        shard stored as inner chunks once, under its own key)."""
        yield from (k for k in sorted(self.root.meta) if k.startswith(prefix))
        p = prefix.encode()
        stop = prefix_upper_bound(p)
        last = None
        for i in self._ranges_between(p, stop):
            for k in self.range(i).iter_keys(p, stop):
                key = shard_key_of(k.decode())
                if key != last:  # a shard's entries follow its key directly
                    yield key
                last = key

    def children(self, prefix: str) -> set[str]:
        """Names directly below `prefix` ('' or ending in '/'), skipping over subtrees."""
        out = {k[len(prefix) :].split("/", 1)[0] for k in self.root.meta if k.startswith(prefix)}
        p = prefix.encode()
        stop = prefix_upper_bound(p)
        for i in self._ranges_between(p, stop):
            r = self.range(i)
            pos, end = r.key_slice(p, stop).start, r.key_slice(p, stop).stop
            while pos < end:
                rest = bytes(r.keys[pos])[len(p) :]
                name, sep, _ = rest.partition(b"/")
                out.add(shard_key_of(name.decode()))
                if sep:
                    pos = int(np.searchsorted(r.keys, p + name + _AFTER_SEGMENT))
                else:
                    pos += 1
        return out
